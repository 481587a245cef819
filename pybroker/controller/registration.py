"""This broker's registration in the cluster: shared by the broker, its control and the handlers
of controller requests (pybroker/services.py carries it)."""
import dataclasses


@dataclasses.dataclass
class Registration:
    """The epoch controller requests are checked against, and whether it is the current one."""
    epoch: int = -1
    recorded: bool = False  # our registration is recorded (epoch is the current one)
