// Declarations for policy.js, the etcd-steward status-policy SDK. The WIT
// types (Observation, Verdict, ...) are generated into wit.d.ts.
/// <reference path="./wit.d.ts" />
import type {
  Condition,
  EndpointStatus,
  Event,
  Observation,
  PolicyInfo,
  ProbeError,
  ProbeReport,
  QuorumFinding,
  QuorumFindingUnverified,
  QuorumFindingVerified,
  UnverifiedQuorum,
  Verdict,
} from 'steward:status/types@0.4.0';

export type * from 'steward:status/types@0.4.0';

export declare const AVAILABLE: 'Available';
export declare const DEGRADED: 'Degraded';
/** etcd's backend quota when spec.options.quotaBackendBytes is unset: 2 GiB. */
export declare const DEFAULT_QUOTA_BACKEND_BYTES: number;
/** The host's limit on a condition or event message, in UTF-8 bytes. */
export declare const MAX_MESSAGE_BYTES: 1024;

/**
 * The host's finding (`observation.quorum`) as evaluate receives it: the WIT
 * variant (`tag`, `val`) with its parts at hand. It is the one definition of
 * a verified quorum (a linearizable read went through raft); a policy takes
 * it as it is. `if (q.verified)` narrows to the verified case.
 */
export type Quorum =
  | (QuorumFindingVerified & {
      /** The host verified a quorum in this observation. */
      verified: true;
      /** The leader the most answering voters name (lowest ID on a tie); undefined when no answer names one. */
      leader: bigint | undefined;
      /** The voters' IDs from etcd's member list; empty when the list could not be read. */
      voters: bigint[];
      /** The answering voters that name `leader`. */
      agreeing: bigint[];
      unverified: undefined;
    })
  | (QuorumFindingUnverified & {
      verified: false;
      leader: undefined;
      /** Empty. */
      voters: bigint[];
      /** Empty. */
      agreeing: bigint[];
      /** Why nothing was verified: kind 'not-probed', 'unreachable' or 'no-quorum', and a message a person can act on. */
      unverified: UnverifiedQuorum;
    });
/** The observation evaluate receives: the WIT record, with `quorum` read by readQuorum. */
export type PolicyObservation = Omit<Observation, 'quorum'> & { quorum: Quorum };
/** What the helpers read: either shape of the observation. */
export type ObservationParts = Omit<Observation, 'quorum'>;

/** The WIT finding read for a policy (a finding already read is returned as it is). */
export declare function readQuorum(finding: QuorumFinding | Quorum): Quorum;
/**
 * The WIT observation as evaluate receives it (for unit tests of a policy's
 * own evaluate); one without `tls` reads as a cluster without spec.tls (all
 * false, no certificates).
 */
export declare function readObservation(
  observation: Observation | PolicyObservation | Omit<Observation | PolicyObservation, 'tls'>,
): PolicyObservation;

/** floor(n/2) + 1. */
export declare function quorum(n: number): number;
/** A member ID as etcd prints it (hex); "?" when unknown. */
export declare function hex(id: bigint | undefined): string;
/** spec.quotaBackendBytes, or etcd's default 2 GiB, as a Number. */
export declare function quotaBytes(observation: ObservationParts): number;
/** The probe report, or undefined when the host could not probe. */
export declare function probeReport(observation: ObservationParts): ProbeReport | undefined;
/** Endpoints whose Status RPC answered. */
export declare function answered(
  observation: ObservationParts,
): Array<{ member: string; endpoint: string; status: EndpointStatus }>;
/** Endpoints probed without an answer. */
export declare function failed(
  observation: ObservationParts,
): Array<{ member: string; endpoint: string; error: ProbeError }>;

export interface Voter {
  /** The member's name (the EtcdMember's when etcd lists it without one). */
  name: string;
  /** etcd's member ID, when known. */
  id?: bigint;
  /** Its Status answer, when it answered. */
  status?: EndpointStatus;
  /** Its probe error, when it was probed without an answer. */
  error?: ProbeError;
}
/**
 * Voting members: etcd's listed non-learners, else the EtcdMembers with role
 * voter; each with what it answered. It describes who answered; whether a
 * quorum exists is `observation.quorum`'s to say.
 */
export declare function votingMembers(observation: ObservationParts): Voter[];

/** true, false, or anything else (null reads well) for unknown. */
export type Status = boolean | null | undefined | 'true' | 'false' | 'unknown' | 'True' | 'False' | 'Unknown';
/** A condition; the message is cut to MAX_MESSAGE_BYTES. */
export declare function condition(type: string, status: Status, reason: string, message?: string): Condition;
export declare function warning(reason: string, message: string): Event;
export declare function normal(reason: string, message: string): Event;
/** Cuts text to at most `max` UTF-8 bytes at a character boundary, marking the cut. */
export declare function clip(text: string, max?: number): string;

/** A setting's JSON Schema: the subset parseSettings checks. */
export interface SettingSchema {
  type: 'number' | 'integer' | 'boolean' | 'string';
  default: number | boolean | string;
  description?: string;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  enum?: ReadonlyArray<number | string | boolean>;
}
export type SettingsSchema = Record<string, SettingSchema>;
/** The settings object parseSettings returns for a schema. */
export type SettingsOf<P extends SettingsSchema> = {
  [K in keyof P]: P[K]['type'] extends 'boolean' ? boolean : P[K]['type'] extends 'string' ? string : number;
};

export declare class SettingsError extends Error {}
/** Refuses the settings; the message is shown to the user. */
export declare function reject(message: string): never;
/** Parses settings JSON against `properties`: defaults, unknown fields, types and ranges. */
export declare function parseSettings<P extends SettingsSchema>(json: string, properties?: P): SettingsOf<P>;
/** The JSON Schema text describe() publishes for `properties`. */
export declare function settingsSchema(properties?: SettingsSchema, title?: string): string;

/**
 * What evaluate returns: conditions, and whatever else it says. Left out:
 * readyMembers 0, no requeue hint, no events, and the host's finding accepted.
 * `declineVerification: 'reason'` declines the finding: the status then does
 * not show the cluster verified. No verdict can claim more than the host found.
 */
export type VerdictParts = Pick<Verdict, 'conditions'> & Partial<Omit<Verdict, 'conditions'>>;

export interface PolicyDefinition<P extends SettingsSchema> {
  name: string;
  version: string;
  /** Default: Available and Degraded. */
  conditionTypes?: string[];
  settings?: P;
  /** Cross-field checks; call reject(message). */
  check?(settings: SettingsOf<P>): void;
  /** `observation.quorum` is the host's finding, read (see Quorum). */
  evaluate(observation: PolicyObservation, settings: SettingsOf<P>): VerdictParts;
}

/** The object componentize-js binds to `steward:status/policy@0.4.0`. */
export interface PolicyExport {
  describe(): PolicyInfo;
  /** Throws the rejection message (a string), which becomes result::err. */
  validateSettings(settings: string): void;
  evaluate(observation: Observation): Verdict;
}

export declare function definePolicy<P extends SettingsSchema = {}>(definition: PolicyDefinition<P>): PolicyExport;
