"""Refusals: each is reported as `independent_loop: error: <Name>: <message>`, exit 1."""


class Refusal(Exception):
    name = "Refusal"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class CheckpointCorrupt(Refusal):
    name = "CheckpointCorrupt"


class UnsupportedSchemaVersion(Refusal):
    name = "UnsupportedSchemaVersion"


class ApprovalRefused(Refusal):
    name = "ApprovalRefused"


class LeaseHeld(Refusal):
    name = "LeaseHeld"


class FencedOff(Refusal):
    name = "FencedOff"


class GatewayRejected(Refusal):
    name = "GatewayRejected"


class GatewayUnavailable(Refusal):
    name = "GatewayUnavailable"


class BadInput(Refusal):
    name = "BadInput"
