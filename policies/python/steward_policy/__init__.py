"""Write etcd-steward status policies in Python.

A status policy is a pure function from an observation of one EtcdCluster to
a verdict (see ``wit/status-policy.wit``, the whole contract,
``steward:status@0.4.0``). This package lets an author write only that
function:

    import steward_policy as sp

    class Mine(sp.StatusPolicy):
        name = "mine"
        settings = sp.Settings(sp.Setting("maxVotersDown", 1, minimum=0))

        def evaluate(self, obs: sp.Observation, settings: dict) -> sp.Verdict:
            if obs.quorum.verified:       # the host's finding, taken as it is
                ...

    Policy = sp.export(Mine)      # the class componentize-py looks for

Everything here runs inside the component, which has no files, clock or
network at run time: import what you need at module level (a lazy import
inside a function would look for files that are not there).

The record, enum and variant classes are the ones componentize-py generates
from the WIT (module ``wit_world``); they are re-exported here so a policy
imports one module. Variant cases are separate classes named
``<Variant>_<Case>`` with the payload in ``.value``, so ``match`` reads:

    match obs.probing:
        case sp.Probing_Attempted(report): ...
        case sp.Probing_Skipped(why): ...

One class is this package's own: ``Observation`` is the WIT record field for
field, except ``quorum``, the host's finding as a ``Quorum``
(``obs.quorum.verified``, ``.leader``, ``.voters``, ``.agreeing``,
``.unverified``). The finding is the one definition of a verified quorum; a
verdict cannot claim verification, only decline it
(``verdict(..., decline_verification="why")``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn

from componentize_py_types import Err
from wit_world import exports as _exports
from wit_world.imports.types import (
    AlarmKind,
    BackupFacts,
    CertificateFacts,
    CertificateRole,
    ClusterRef,
    ClusterSpec,
    Condition,
    ConditionStatus,
    EndpointProbe,
    EndpointStatus,
    EtcdMember,
    Event,
    EventType,
    History,
    HostPhase,
    Member,
    MemberListOutcome,
    MemberListOutcome_Failed,
    MemberListOutcome_Listed,
    MemberListOutcome_NotAttempted,
    MemberRole,
    PodPhase,
    PolicyInfo,
    PreviousCondition,
    ProbeError,
    ProbeErrorKind,
    ProbeOutcome,
    ProbeOutcome_Answered,
    ProbeOutcome_Failed,
    ProbeReport,
    Probing,
    Probing_Attempted,
    Probing_Skipped,
    QuorumReadOutcome,
    QuorumReadOutcome_Failed,
    QuorumReadOutcome_NotAttempted,
    QuorumReadOutcome_Succeeded,
    QuorumFinding,
    QuorumFinding_Unverified,
    QuorumFinding_Verified,
    Termination,
    TlsFacts,
    UnverifiedKind,
    UnverifiedQuorum,
    Verdict,
    VerifiedQuorum,
)
from wit_world.imports.types import Observation as WitObservation

__all__ = [
    # WIT types
    "AlarmKind",
    "BackupFacts",
    "CertificateFacts",
    "CertificateRole",
    "ClusterRef",
    "ClusterSpec",
    "Condition",
    "ConditionStatus",
    "EndpointProbe",
    "EndpointStatus",
    "EtcdMember",
    "Event",
    "EventType",
    "History",
    "HostPhase",
    "Member",
    "MemberListOutcome",
    "MemberListOutcome_Failed",
    "MemberListOutcome_Listed",
    "MemberListOutcome_NotAttempted",
    "MemberRole",
    "PodPhase",
    "PolicyInfo",
    "PreviousCondition",
    "ProbeError",
    "ProbeErrorKind",
    "ProbeOutcome",
    "ProbeOutcome_Answered",
    "ProbeOutcome_Failed",
    "ProbeReport",
    "Probing",
    "Probing_Attempted",
    "Probing_Skipped",
    "QuorumReadOutcome",
    "QuorumReadOutcome_Failed",
    "QuorumReadOutcome_NotAttempted",
    "QuorumReadOutcome_Succeeded",
    "QuorumFinding",
    "QuorumFinding_Unverified",
    "QuorumFinding_Verified",
    "Termination",
    "TlsFacts",
    "UnverifiedKind",
    "UnverifiedQuorum",
    "Verdict",
    "VerifiedQuorum",
    "WitObservation",
    # this module
    "AVAILABLE",
    "DEGRADED",
    "MAX_MESSAGE_BYTES",
    "Observation",
    "Quorum",
    "Voter",
    "Setting",
    "Settings",
    "SettingsError",
    "StatusPolicy",
    "answered",
    "available",
    "condition",
    "define",
    "degraded",
    "export",
    "failed",
    "hex_id",
    "is_paused",
    "listed_members",
    "name_list",
    "normal",
    "parse_settings",
    "probe_report",
    "quorum",
    "reject",
    "verdict",
    "voting_members",
    "warning",
]

#: The SDK's version; it targets the WIT package steward:status@0.4.0.
__version__ = "0.4.0"

AVAILABLE = "Available"
DEGRADED = "Degraded"
#: The host rejects a verdict with a longer condition or event message (and
#: writes its fallback instead), so the constructors here cut messages to it.
MAX_MESSAGE_BYTES = 1024

# --------------------------------------------------------------------------
# The observation, with the host's finding
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Quorum:
    """The host's finding on one observation (``obs.quorum``): the one
    definition of a verified quorum. A linearizable read went through raft
    (etcd's own proof that a quorum exists), and the leader is the one the
    most answering voters name. A policy takes it as it is and derives no
    verification of its own; the host rejects a verdict that says Available
    True while the finding shows no quorum or no member answered (docs/api.md,
    "Verified").

    ``finding`` is the WIT variant as the host sent it, for ``match``::

        match obs.quorum.finding:
            case sp.QuorumFinding_Verified(q): ...
            case sp.QuorumFinding_Unverified(u): ...
    """

    finding: QuorumFinding

    @property
    def verified(self) -> bool:
        """The host verified a quorum in this observation."""
        return isinstance(self.finding, QuorumFinding_Verified)

    @property
    def leader(self) -> int | None:
        """The leader the most answering voters name (the lowest ID on a tie);
        None when nothing was verified or no answer names one."""
        f = self.finding
        return f.value.leader if isinstance(f, QuorumFinding_Verified) else None

    @property
    def voters(self) -> list[int]:
        """The voters' IDs from etcd's member list; empty when nothing was
        verified or the list could not be read."""
        f = self.finding
        return list(f.value.voters) if isinstance(f, QuorumFinding_Verified) else []

    @property
    def agreeing(self) -> list[int]:
        """The answering voters that name ``leader``; empty when nothing was verified."""
        f = self.finding
        return list(f.value.agreeing) if isinstance(f, QuorumFinding_Verified) else []

    @property
    def unverified(self) -> UnverifiedQuorum | None:
        """Why nothing was verified (``.kind``: ``UnverifiedKind.NOT_PROBED``,
        ``UNREACHABLE`` or ``NO_QUORUM``; ``.message``: a sentence a person can
        act on); None when a quorum was verified."""
        f = self.finding
        return f.value if isinstance(f, QuorumFinding_Unverified) else None


@dataclass
class Observation:
    """What the host saw of one cluster: the policy's whole input. The WIT
    record ``observation`` field for field, except ``quorum``: the host's
    finding as a :class:`Quorum`. ``Observation.from_wit`` makes one from the
    record (the export does, before ``evaluate``)."""

    cluster: ClusterRef
    spec: ClusterSpec
    phase: HostPhase
    members: list[Member]
    probing: Probing
    quorum: Quorum
    history: History
    #: The cluster's backup schedule and last verified snapshot (``.schedule``,
    #: ``.schedule_created``, ``.interval_ms``, ``.last_success``); None when no
    #: active EtcdBackupSchedule names the cluster.
    backup: BackupFacts | None
    #: The cluster's TLS (``.client``, ``.client_cert_auth``, ``.peer``, and
    #: ``.certificates``: each a :class:`CertificateFacts` with ``.role``, a
    #: :class:`CertificateRole`, ``.secret``, ``.not_before`` and ``.not_after``
    #: in Unix ms); all False and no certificates without spec.tls.
    tls: TlsFacts
    now: int
    settings: str

    @classmethod
    def from_wit(cls, o: WitObservation) -> Observation:
        return cls(
            o.cluster,
            o.spec,
            o.phase,
            o.members,
            o.probing,
            Quorum(o.quorum),
            o.history,
            o.backup,
            o.tls,
            o.now,
            o.settings,
        )


# --------------------------------------------------------------------------
# Reading the observation
# --------------------------------------------------------------------------


def quorum(n: int) -> int:
    """Votes raft needs among ``n`` voting members: a strict majority."""
    return n // 2 + 1


def is_paused(obs: Observation) -> bool:
    """The cluster is intentionally dormant: phase Paused or spec.replicas 0."""
    return obs.phase == HostPhase.PAUSED or obs.spec.desired_replicas == 0


def probe_report(obs: Observation) -> ProbeReport | None:
    """The probe report, or None when the host could not probe at all.

    "Probed and failed" is evidence about etcd; "not probed" is only a lack
    of evidence. Policies should treat them differently, so this returns
    None rather than an empty report.
    """
    match obs.probing:
        case Probing_Attempted(report):
            return report
        case _:
            return None


def answered(obs: Observation) -> dict[str, EndpointStatus]:
    """Member name -> what its endpoint answered to etcd's Status RPC.

    Only endpoints that answered in this observation; empty when not probed.
    """
    report = probe_report(obs)
    if report is None:
        return {}
    return {
        p.member: p.outcome.value for p in report.endpoints if isinstance(p.outcome, ProbeOutcome_Answered)
    }


def failed(obs: Observation) -> dict[str, ProbeError]:
    """Member name -> why its endpoint did not answer (probed and failed)."""
    report = probe_report(obs)
    if report is None:
        return {}
    return {p.member: p.outcome.value for p in report.endpoints if isinstance(p.outcome, ProbeOutcome_Failed)}


def listed_members(obs: Observation) -> list[EtcdMember] | None:
    """etcd's own MemberList, or None when it was not obtained."""
    report = probe_report(obs)
    if report is not None and isinstance(report.member_list, MemberListOutcome_Listed):
        return report.member_list.value
    return None


@dataclass(frozen=True)
class Voter:
    """A member that counts toward raft quorum.

    ``member`` is the EtcdMember (with its Pod facts), None when etcd lists a
    voter the operator has no EtcdMember for. ``status`` is what the voter's
    endpoint answered in this observation, None when it did not answer or
    was not probed.
    """

    name: str
    member_id: int | None
    member: Member | None
    status: EndpointStatus | None

    @property
    def answered(self) -> bool:
        return self.status is not None


def voting_members(obs: Observation) -> list[Voter]:
    """The voting members, with what each answered.

    etcd's MemberList is the truth when it was obtained: its non-learners,
    matched to EtcdMembers by member ID, then by name. Otherwise the
    EtcdMembers whose role is voter. Learners never count toward quorum.
    This describes who answered; whether a quorum exists is ``obs.quorum``'s
    to say.
    """
    answers = answered(obs)
    by_id = {s.member_id: s for s in answers.values()}
    listed = listed_members(obs)
    if listed is None:
        return [
            Voter(m.name, m.member_id, m, answers.get(m.name))
            for m in obs.members
            if m.role == MemberRole.VOTER
        ]
    members_by_id = {m.member_id: m for m in obs.members if m.member_id is not None}
    members_by_name = {m.name: m for m in obs.members}
    voters = []
    for em in listed:
        if em.is_learner:
            continue
        member = members_by_id.get(em.id) or members_by_name.get(em.name)
        name = member.name if member else (em.name or hex_id(em.id))
        status = by_id.get(em.id)
        if status is None and member is not None:
            status = answers.get(member.name)
        voters.append(Voter(name, em.id, member, status))
    return voters


def hex_id(member_id: int) -> str:
    """A member ID as etcdctl prints it (hex), as users will search for it."""
    return format(member_id, "x")


def name_list(names: Iterable[str], limit: int = 10) -> str:
    """``"etcd-a, etcd-b and 3 more"``: names for a message, bounded so a big
    cluster cannot push the message past the host's 1 KiB limit."""
    items = list(names)
    if not items:
        return "none"
    if len(items) <= limit:
        return ", ".join(items)
    return f"{', '.join(items[:limit])} and {len(items) - limit} more"


# --------------------------------------------------------------------------
# Building the verdict
# --------------------------------------------------------------------------

StatusLike = bool | None | ConditionStatus


def _status(status: StatusLike) -> ConditionStatus:
    if isinstance(status, ConditionStatus):
        return status
    if status is None:
        return ConditionStatus.UNKNOWN
    return ConditionStatus.TRUE if status else ConditionStatus.FALSE


def _cap(message: str) -> str:
    """Cuts a message to MAX_MESSAGE_BYTES of UTF-8 at a character boundary:
    a cut message beats the fallback verdict a long one would cause."""
    data = message.encode("utf-8")
    if len(data) <= MAX_MESSAGE_BYTES:
        return message
    return data[: MAX_MESSAGE_BYTES - 3].decode("utf-8", "ignore") + "…"


def condition(type_: str, status: StatusLike, reason: str, message: str = "") -> Condition:
    """A condition; ``status`` may be True/False/None (Unknown) or a ConditionStatus.

    Type and reason must be CamelCase (``^[A-Z][A-Za-z0-9]*$``); the message
    is cut to the host's limit.
    """
    return Condition(type_, _status(status), reason, _cap(message))


def available(status: StatusLike, reason: str, message: str = "") -> Condition:
    """The ``Available`` condition every verdict must carry."""
    return condition(AVAILABLE, status, reason, message)


def degraded(status: StatusLike, reason: str, message: str = "") -> Condition:
    """The ``Degraded`` condition every verdict must carry."""
    return condition(DEGRADED, status, reason, message)


def warning(reason: str, message: str) -> Event:
    """A Warning Event on the EtcdCluster (reason CamelCase)."""
    return Event(EventType.WARNING, reason, _cap(message))


def normal(reason: str, message: str) -> Event:
    """A Normal Event on the EtcdCluster (reason CamelCase)."""
    return Event(EventType.NORMAL, reason, _cap(message))


def verdict(
    conditions: Iterable[Condition],
    *,
    ready_members: int = 0,
    decline_verification: str | None = None,
    requeue_after_ms: int | None = None,
    events: Iterable[Event] = (),
) -> Verdict:
    """A verdict with safe defaults: nothing ready, the host's finding accepted.

    Verification is the host's (``obs.quorum``): the status shows the cluster
    verified when the host verified a quorum, unless ``decline_verification``
    gives a reason of the policy's own not to (a membership smaller than the
    spec, say). A verdict cannot claim more than the host found. Say
    Available True only when ``obs.quorum.verified``: the host rejects it
    while the finding is unreachable or no-quorum (and, not probed, before
    the cluster was ever verified).
    """
    return Verdict(list(conditions), ready_members, decline_verification, requeue_after_ms, list(events))


# --------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------


class SettingsError(ValueError):
    """Settings are refused; the message is shown to the user as is."""


def reject(message: str) -> NoReturn:
    """Refuses settings from ``check_settings``, telling the user why."""
    raise SettingsError(message)


def parse_settings(text: str) -> dict[str, Any]:
    """spec.statusPolicy.settings (JSON text) as a dict; ``""`` means ``{}``."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text, parse_constant=_not_json)
    except ValueError as e:
        raise SettingsError(f"invalid settings: not JSON: {e}") from None
    if not isinstance(value, dict):
        raise SettingsError(f"invalid settings: expected a JSON object, got {_kind_of(value)}")
    return value


def _not_json(constant: str) -> NoReturn:
    # Python's json reads NaN and Infinity; JSON (and the host) does not.
    raise ValueError(f"{constant} is not a JSON value")


def _kind_of(value: Any) -> str:
    """A JSON value's kind, as the JavaScript SDK words it: "an array"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _show(value: Any) -> str:
    """A settings value in an error message, as the JavaScript SDK shows it:
    scalars as JSON (``"2"``, ``true``, ``1.5``), arrays and objects by kind."""
    if value is None or isinstance(value, (list, dict)):
        return _kind_of(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _num(value)
    return json.dumps(value, ensure_ascii=False)


_SCHEMA_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


@dataclass(frozen=True)
class Setting:
    """One settings field. Its type is the type of ``default`` (bool, int,
    float or str); ``minimum``/``maximum`` bound numbers, inclusive."""

    name: str
    default: bool | int | float | str
    description: str = ""
    minimum: float | None = None
    maximum: float | None = None

    @property
    def kind(self) -> type:
        return type(self.default)

    def schema(self) -> dict[str, Any]:
        s: dict[str, Any] = {"type": _SCHEMA_TYPES[self.kind], "default": self.default}
        if self.minimum is not None:
            s["minimum"] = self.minimum
        if self.maximum is not None:
            s["maximum"] = self.maximum
        if self.description:
            s["description"] = self.description
        return s

    def expected(self) -> str:
        """What a value must be: "an integer at least 0 and at most 3600"."""
        bounds = []
        if self.minimum is not None:
            bounds.append(f"at least {_num(self.minimum)}")
        if self.maximum is not None:
            bounds.append(f"at most {_num(self.maximum)}")
        return " ".join([_A[self.kind], " and ".join(bounds)]) if bounds else _A[self.kind]

    def check(self, value: Any) -> Any:
        """The value, converted to the field's type, or SettingsError naming
        the field, what it must be (type and range) and what it got, worded
        as the JavaScript SDK words it."""
        kind = self.kind
        given = value
        if kind is bool:
            ok = isinstance(value, bool)
        elif kind is int:
            # JSON Schema's integer includes 2.0; bool is an int in Python, not in JSON.
            ok = not isinstance(value, bool) and (
                isinstance(value, int) or (isinstance(value, float) and value.is_integer())
            )
            value = int(value) if ok else value
        elif kind is float:
            ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
            value = float(value) if ok else value
        else:
            ok = isinstance(value, str)
        if (
            not ok
            or (self.minimum is not None and value < self.minimum)
            or (self.maximum is not None and value > self.maximum)
        ):
            raise SettingsError(
                f"invalid settings: {self.name} must be {self.expected()}, got {_show(given)}"
            )
        return value


_A = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


def _num(x: float) -> str:
    """A number as JavaScript prints it: 2 for 2.0, 1e-7 for 1e-07."""
    if isinstance(x, int):
        return str(x)
    if x.is_integer() and abs(x) < 1e21:
        return str(int(x))
    text = repr(x)
    mantissa, e, exponent = text.partition("e")
    if not e:
        return text
    sign = "-" if exponent.startswith("-") else "+"
    return f"{mantissa}e{sign}{exponent.lstrip('+-').lstrip('0') or '0'}"


class Settings:
    """A policy's settings: their JSON Schema for ``describe()`` and the check
    ``validate-settings`` runs, from one declaration so they cannot disagree.

    Unknown fields are refused: a typo must not silently mean "default".
    Every error is worded as the JavaScript SDK words it (the table both
    SDKs' tests check: etcd-steward's policies/js/scripts/settings-errors.json):

        invalid settings: not JSON: <the parser's message>
        invalid settings: expected a JSON object, got an array
        invalid settings: unknown field "x"; known fields: a, b
        invalid settings: unknown field "x"; this policy takes no settings
        invalid settings: a must be an integer at least 0 and at most 9, got "2"

    Unknown fields are reported first (by name), then the declared fields in
    their order.
    """

    def __init__(self, *fields: Setting) -> None:
        self.fields = {f.name: f for f in fields}

    def defaults(self) -> dict[str, Any]:
        return {name: f.default for name, f in self.fields.items()}

    def schema(self, title: str = "settings") -> dict[str, Any]:
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": title,
            "type": "object",
            "additionalProperties": False,
            "properties": {name: f.schema() for name, f in self.fields.items()},
        }

    def parse(self, raw: str | Mapping[str, Any]) -> dict[str, Any]:
        """Settings JSON text (or a parsed dict) -> every field, defaults filled."""
        given = parse_settings(raw) if isinstance(raw, str) else dict(raw)
        for key in sorted(given):
            if key not in self.fields:
                known = (
                    f"known fields: {', '.join(self.fields)}"
                    if self.fields
                    else "this policy takes no settings"
                )
                raise SettingsError(
                    f"invalid settings: unknown field {json.dumps(key, ensure_ascii=False)}; {known}"
                )
        values = self.defaults()
        for key, field in self.fields.items():
            if key in given:
                values[key] = field.check(given[key])
        return values


# --------------------------------------------------------------------------
# Glue: from a StatusPolicy to the export componentize-py calls
# --------------------------------------------------------------------------


class StatusPolicy:
    """Subclass this, set the class attributes and implement ``evaluate``.

    ``settings`` declares the accepted settings (none by default); put rules
    that involve several fields in ``check_settings``. The host validates
    settings before it evaluates, so ``evaluate`` receives checked values.
    """

    name: ClassVar[str] = "python-policy"
    version: ClassVar[str] = "0.1.0"
    condition_types: ClassVar[tuple[str, ...]] = (AVAILABLE, DEGRADED)
    settings: ClassVar[Settings] = Settings()

    def check_settings(self, settings: dict[str, Any]) -> None:
        """Cross-field rules; call ``reject(message)`` to refuse."""

    def evaluate(self, obs: Observation, settings: dict[str, Any]) -> Verdict:
        raise NotImplementedError("a StatusPolicy must implement evaluate(obs, settings)")

    def load_settings(self, text: str) -> dict[str, Any]:
        """Parse, check types and ranges, then the policy's own rules."""
        values = self.settings.parse(text)
        self.check_settings(values)
        return values


def _error_text(e: BaseException) -> str:
    """``KeyError: 'x' (app.py, line 12, in evaluate)``: the error and the
    innermost frame of the policy's own code (not this SDK's), read from the
    traceback objects themselves; the ``traceback`` module would look up
    source lines in files, and a component has none."""
    try:
        said = str(e)
    except Exception:  # a __str__ that raises must not turn into a trap
        said = "(its message could not be read)"
    text = f"{type(e).__name__}: {said}" if said else type(e).__name__
    where = None
    tb = e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename != globals().get("__file__"):
            where = f"{code.co_filename.rsplit('/', 1)[-1]}, line {tb.tb_lineno}, in {code.co_name}"
        tb = tb.tb_next
    return f"{text} ({where})" if where else text


def export(policy: type[StatusPolicy]) -> type:
    """The class implementing the WIT ``policy`` export, for ``Policy = export(Mine)``.

    componentize-py instantiates the module-level class named ``Policy`` and
    calls its methods with the WIT signatures; this adapts them to the
    author's class: JSON Schema from ``settings``, settings errors as
    ``result::err``, and checked settings passed to ``evaluate``.
    """
    impl = policy()

    class Policy(_exports.Policy):
        def describe(self) -> PolicyInfo:
            schema = json.dumps(impl.settings.schema(f"{impl.name} settings"), separators=(",", ":"))
            return PolicyInfo(impl.name, impl.version, list(impl.condition_types), schema)

        def validate_settings(self, settings: str) -> None:
            try:
                impl.load_settings(settings)
            except SettingsError as e:
                raise Err(str(e)) from None
            except Exception as e:
                raise Err(f"settings check failed: {_error_text(e)}") from None

        def evaluate(self, observation: WitObservation) -> Verdict:
            try:
                values = impl.load_settings(observation.settings)
                problem = None
            except Exception as e:
                # The host never evaluates settings validate-settings refused;
                # should it happen anyway, judge with defaults and say so
                # rather than give no verdict.
                problem = str(e) if isinstance(e, SettingsError) else _error_text(e)
                values = impl.settings.defaults()
            try:
                # The host's finding, as the host made it, read as a Quorum.
                obs = (
                    observation
                    if isinstance(observation, Observation)
                    else Observation.from_wit(observation)
                )
                result = impl.evaluate(obs, values)
                if not isinstance(result, Verdict):
                    raise TypeError(f"{policy.__name__}.evaluate returned {type(result).__name__}, not a Verdict")
                declined = result.decline_verification
                if declined is not None and not isinstance(declined, str):
                    # A 0.1.0-shaped Verdict(conditions, n, True, ...) lands here.
                    raise TypeError(
                        f"decline_verification must be a str (the reason) or None, got "
                        f"{type(declined).__name__}: since steward:status@0.2.0 verification is "
                        "the host's (obs.quorum), and a verdict can only decline it"
                    )
            except Exception as e:
                # Built with --stub-wasi, an uncaught exception is a bare wasm
                # trap (printing the traceback itself traps): the host would
                # still fall back, but nobody would see the Python error. This
                # verdict claims nothing (it declines the host's finding, as
                # the host's own fallback does not verify) and names the
                # error and its line.
                message = f"the policy's evaluate raised {_error_text(e)}"
                result = verdict(
                    [
                        available(None, "PolicyError", message),
                        degraded(None, "PolicyError", message),
                    ],
                    decline_verification=_cap(message),
                    events=[warning("PolicyError", message)],
                )
            if problem is not None:
                result.events.append(warning("InvalidSettings", f"using default settings: {problem}"))
            return result

    Policy.__qualname__ = Policy.__name__ = "Policy"
    return Policy


def define(
    name: str,
    evaluate: Callable[[Observation, dict[str, Any]], Verdict],
    *,
    version: str = "0.1.0",
    settings: Settings | None = None,
    check_settings: Callable[[dict[str, Any]], None] | None = None,
    condition_types: Iterable[str] = (AVAILABLE, DEGRADED),
) -> type:
    """``export`` for plain functions: ``Policy = define("mine", evaluate)``."""
    attrs: dict[str, Any] = {
        "name": name,
        "version": version,
        "settings": settings if settings is not None else Settings(),
        "condition_types": tuple(condition_types),
        "evaluate": lambda self, obs, values: evaluate(obs, values),
    }
    if check_settings is not None:
        attrs["check_settings"] = lambda self, values: check_settings(values)
    return export(type(name, (StatusPolicy,), attrs))
