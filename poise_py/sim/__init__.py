"""A virtual-time fault simulator: compare balancing configurations on identical traffic.

``poise simulate`` is its command line; from Python::

    from poise_py import sim

    scenario = sim.load_scenario("grpc-worker-pool")
    report = sim.run(scenario)
    for result in report.results:
        print(result.configuration, result.success_rate)

``sim.run_configuration(scenario, configuration)`` runs one configuration of your own on
the scenario's traffic.
"""

from __future__ import annotations

from ._engine import SETTLE_TIME as SETTLE_TIME
from ._engine import Configuration as Configuration
from ._engine import DiscoverySpec as DiscoverySpec
from ._engine import Engine as Engine
from ._engine import Fleet as Fleet
from ._engine import Outcomes as Outcomes
from ._engine import Reporting as Reporting
from ._engine import RunResult as RunResult
from ._engine import Sample as Sample
from ._engine import Traffic as Traffic
from ._engine import percentile as percentile
from ._meter import LoadMeter as LoadMeter
from ._models import EndpointModel as EndpointModel
from ._models import Flap as Flap
from ._models import Latency as Latency
from ._models import Phase as Phase
from ._models import Quota as Quota
from ._models import RateLimit as RateLimit
from ._models import Warmup as Warmup
from ._observe import ClassifierName as ClassifierName
from ._observe import Client as Client
from ._observe import GrpcStatus as GrpcStatus
from ._observe import HttpStatus as HttpStatus
from ._observe import Overloaded as Overloaded
from ._observe import Protocol as Protocol
from ._observe import Refused as Refused
from ._observe import Stated as Stated
from ._observe import Throttled as Throttled
from ._observe import Timeout as Timeout
from ._run import Report as Report
from ._run import run as run
from ._run import run_configuration as run_configuration
from ._scenario import Scenario as Scenario
from ._scenario import builtin_names as builtin_names
from ._scenario import default_configurations as default_configurations
from ._scenario import first_sentence as first_sentence
from ._scenario import load_scenario as load_scenario
from ._scenario import parse_scenario as parse_scenario
