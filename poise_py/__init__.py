"""poise_py: a client-side load balancer for structured concurrency (anyio: Trio and asyncio).

Callers write ``async with lb.acquire() as permit:``; the permit is tagged with its
endpoint's circuit epoch, and how the block ends is the health signal.
"""

from __future__ import annotations

from . import classify as classify
from . import probes as probes
from ._balancer import LoadBalancer as LoadBalancer
from ._call import Attempt as Attempt
from ._call_observers import CallEnded as CallEnded
from ._call_observers import CallObserver as CallObserver
from ._coordination._config import Coordination as Coordination
from ._coordination._config import CoordinationChange as CoordinationChange
from ._coordination._config import CoordinationStatistics as CoordinationStatistics
from ._coordination._memory import InMemoryStorage as InMemoryStorage
from ._coordination._protocol import Storage as Storage
from ._coordination._redis import RedisStorage as RedisStorage
from ._core._budget import RetryBudget as RetryBudget
from ._core._circuit import Cause as Cause
from ._core._circuit import CircuitState as CircuitState
from ._core._circuit_policy import CircuitPolicy as CircuitPolicy
from ._core._circuit_policy import CountWindow as CountWindow
from ._core._circuit_policy import TimeWindow as TimeWindow
from ._core._concurrency import AIMD as AIMD
from ._core._concurrency import AdaptiveConcurrency as AdaptiveConcurrency
from ._core._concurrency import Gradient2 as Gradient2
from ._core._concurrency import SlowStart as SlowStart
from ._core._ejection import Backoff as Backoff
from ._core._ejection import Escalation as Escalation
from ._core._ejection import HardCap as HardCap
from ._core._event_values import BalancerEvent as BalancerEvent
from ._core._event_values import NoEligibleCleared as NoEligibleCleared
from ._core._event_values import NoEligiblePersisting as NoEligiblePersisting
from ._core._health_schedule import HealthCheck as HealthCheck
from ._core._health_schedule import HealthSnapshot as HealthSnapshot
from ._core._health_schedule import HealthStatus as HealthStatus
from ._core._outlier import SuccessRateEjection as SuccessRateEjection
from ._core._routing import Panic as Panic
from ._core._routing import PanicMode as PanicMode
from ._core._routing import Routing as Routing
from ._core._selection import ConsistentHash as ConsistentHash
from ._core._selection import PeakEwma as PeakEwma
from ._core._selection import Policy as Policy
from ._core._selection import PowerOfTwoChoices as PowerOfTwoChoices
from ._core._selection import Random as Random
from ._core._selection import RoundRobin as RoundRobin
from ._core._selection import WeightedByLoad as WeightedByLoad
from ._core._selection import WeightedRandom as WeightedRandom
from ._core._selection import WeightedRoundRobin as WeightedRoundRobin
from ._core._shared import PROTOCOL_VERSION as PROTOCOL_VERSION
from ._core._shared import Changes as Changes
from ._core._shared import OpenWait as OpenWait
from ._core._shared import ProbeReport as ProbeReport
from ._core._shared import Reply as Reply
from ._core._shared import SharedState as SharedState
from ._core._tails import Hedge as Hedge
from ._core._tails import Quantile as Quantile
from ._core._tails import RetryBackoff as RetryBackoff
from ._decision import Decision as Decision
from ._decision import DecisionMode as DecisionMode
from ._default_classifier import Classifier as Classifier
from ._default_classifier import FaultError as FaultError
from ._default_classifier import default_classifier as default_classifier
from ._discovery import Delta as Delta
from ._discovery import DiscoveryEnd as DiscoveryEnd
from ._discovery import Snapshot as Snapshot
from ._discovery import StaticDiscovery as StaticDiscovery
from ._discovery import Update as Update
from ._discovery._dns import DnsDiscovery as DnsDiscovery
from ._discovery._file import FileDiscovery as FileDiscovery
from ._discovery._publisher import DiscoveryPublisher as DiscoveryPublisher
from ._discovery._publisher import Subscription as Subscription
from ._endpoint import AdminStatus as AdminStatus
from ._endpoint import Endpoint as Endpoint
from ._errors import AlreadyRunning as AlreadyRunning
from ._errors import CapacityOverflow as CapacityOverflow
from ._errors import ConfigError as ConfigError
from ._errors import CoordinationError as CoordinationError
from ._errors import CoordinationUnavailable as CoordinationUnavailable
from ._errors import DiscoveryClosed as DiscoveryClosed
from ._errors import DiscoveryError as DiscoveryError
from ._errors import DuplicateIdentity as DuplicateIdentity
from ._errors import DuplicateRevision as DuplicateRevision
from ._errors import EmptyPool as EmptyPool
from ._errors import EndpointFactoryError as EndpointFactoryError
from ._errors import EndpointsFileError as EndpointsFileError
from ._errors import IneligibleReason as IneligibleReason
from ._errors import NoEligibleEndpoints as NoEligibleEndpoints
from ._errors import NotDraining as NotDraining
from ._errors import NotRunning as NotRunning
from ._errors import Overloaded as Overloaded
from ._errors import PermitError as PermitError
from ._errors import PoiseError as PoiseError
from ._errors import ProbeFailed as ProbeFailed
from ._errors import PublisherClosed as PublisherClosed
from ._errors import ReadinessError as ReadinessError
from ._errors import ReadyTimeout as ReadyTimeout
from ._errors import RevisionOverflow as RevisionOverflow
from ._errors import SelectionError as SelectionError
from ._errors import StaleRevision as StaleRevision
from ._errors import UnknownIdentity as UnknownIdentity
from ._errors import WeightOverflow as WeightOverflow
from ._errors import WrongThread as WrongThread
from ._events import CircuitClosed as CircuitClosed
from ._events import CircuitHalfOpened as CircuitHalfOpened
from ._events import CircuitOpened as CircuitOpened
from ._events import ConcurrencyLimitChanged as ConcurrencyLimitChanged
from ._events import CoordinationFallback as CoordinationFallback
from ._events import DiscoveryApplied as DiscoveryApplied
from ._events import DiscoveryRejected as DiscoveryRejected
from ._events import EndpointDegradationEnded as EndpointDegradationEnded
from ._events import EndpointDegraded as EndpointDegraded
from ._events import EndpointEjected as EndpointEjected
from ._events import EndpointReadmitted as EndpointReadmitted
from ._events import PanicEnded as PanicEnded
from ._events import PanicStarted as PanicStarted
from ._events import SlowStartBegan as SlowStartBegan
from ._events import SlowStartEnded as SlowStartEnded
from ._faults import Classification as Classification
from ._faults import Fault as Fault
from ._load_report import LoadReport as LoadReport
from ._load_report import LoadReportError as LoadReportError
from ._load_report import load_report_from_headers as load_report_from_headers
from ._load_report import load_report_from_metadata as load_report_from_metadata
from ._logs import LogLimit as LogLimit
from ._membership import Readiness as Readiness
from ._permit import Permit as Permit
from ._quota import Quota as Quota
from ._quota import quota_from_headers as quota_from_headers
from ._snapshot import EndpointCounters as EndpointCounters
from ._snapshot import EndpointSnapshot as EndpointSnapshot
from ._snapshot import PoolSnapshot as PoolSnapshot
from ._snapshot import TierSnapshot as TierSnapshot
from ._statistics import BalancerStatistics as BalancerStatistics
from ._statistics import PoolCounters as PoolCounters
from ._telemetry import EventStream as EventStream
from ._telemetry import Observer as Observer
from ._version import VERSION, compiled
from ._waiting import PendingPermit as PendingPermit

__version__ = VERSION

COMPILED: bool = compiled()
"""True if this install runs the hot path compiled (the optional mypyc build, ``docs/performance.md``)."""
