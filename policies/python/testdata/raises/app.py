"""A policy whose code raises: the SDK turns the exception into a verdict
that claims nothing and names it, instead of a bare wasm trap.
host/tests/sdk_examples.rs builds it (with --stub-wasi, as by default)."""

import steward_policy as sp


class Raises(sp.StatusPolicy):
    name = "raises"
    settings = sp.Settings(sp.Setting("crashCheck", False), sp.Setting("mode", "divide"))

    def check_settings(self, settings: dict) -> None:
        if settings["crashCheck"]:
            {}["crash"]

    def evaluate(self, obs: sp.Observation, settings: dict) -> sp.Verdict:
        if settings["mode"] == "return-int":
            return 42
        if settings["mode"] == "sdk-helper":
            sp.quorum(None)
        share = 1 // len(obs.members)
        return sp.verdict([sp.available(None, "Fine", str(share)), sp.degraded(False, "Fine")])


Policy = sp.export(Raises)
