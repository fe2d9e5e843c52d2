"""Project settings. There is no need to edit this file unless you want to change values
from the Kedro defaults. For further information, including these default values, see
https://docs.kedro.org/en/stable/configure/configuration_basics/#configuration"""

# Every parameter block is parsed strictly before any node runs: a misspelt key is an
# error naming the key and the file that set it (configuration/strict.py).
# A method's seeds (`seeds: [42, 43, 44]`) each get their block in the catalog.
# The graph is built from the run's parameters, `--params` included (own data adds nodes).
# A `kedro run` started as one of several launcher processes (torchrun, accelerate
# launch --multi_gpu, mpirun) stops before any node: training starts its own workers.
# The leaderboard node waits for every metrics data set of the graph; those a run does
# not write get a placeholder. A run that writes metrics without it says so at its end.
# A change of seeds or parameters leaves no model of the old setting at a loadable path.
# A new model whose run still has the previous model's scores says so when it is saved.
# Before any node runs, the data sets the run writes and reads are locked: a second run
# in the same checkout that needs them stops at once, naming the run that holds them.
# A data step that stops because nothing of its input is usable still writes its report.
# A run removes what killed runs left, its workers die with it, SIGTERM acts as Ctrl-C.
# The log is one line per record in files and pipes and in logs/kedro.log (runs/log_handlers.py);
# a training run's lines and progress bar name the run (training/run_name.py).
# Each hook lives with the concern it serves (docs/architecture.md); this file only lists them.
from contrastive_sentence_embeddings.evaluation.hooks import EarlierScoresHook  # noqa: E402
from contrastive_sentence_embeddings.pipelines.hooks import (  # noqa: E402
    GraphParametersHook,
    LeaderboardOrderingHook,
    SeedRunsHook,
    StaleLeaderboardHook,
    StrictParametersHook,
)
from contrastive_sentence_embeddings.runs.hooks import (  # noqa: E402
    RunLockHook,
    ScratchHook,
    SingleProcessRunHook,
    StoppedStepReportHook,
)
from contrastive_sentence_embeddings.training.hooks import RunNameHook, StaleModelsHook  # noqa: E402
from contrastive_sentence_embeddings.runs.log_handlers import RunLoggingHook  # noqa: E402

# Pluggy calls the last registered hook first (tryfirst hooks before the others): the
# refusal comes before anything else, then the graph's parameters, then the strict check
# (the run's logging is tryfirst: set before any of them logs).
HOOKS = (RunLoggingHook(), GraphParametersHook(), StrictParametersHook(), SeedRunsHook(), StaleModelsHook(), SingleProcessRunHook(),
         LeaderboardOrderingHook(), StaleLeaderboardHook(), EarlierScoresHook(), StoppedStepReportHook(), ScratchHook(),
         RunLockHook(), RunNameHook())

# Installed plugins for which to disable hook auto-registration. Telemetry is off for
# this project (also through the committed .telemetry file and KEDRO_DISABLE_TELEMETRY
# in the Makefile): runs must not reach the network.
DISABLE_HOOKS_FOR_PLUGINS = ("kedro-telemetry",)

# Class that manages the KedroSession.
# from kedro.framework.session import KedroSession
# SESSION_CLASS = KedroSession

# Class that manages storing KedroSession data.
# from kedro.framework.session.store import BaseSessionStore
# SESSION_STORE_CLASS = BaseSessionStore
# Keyword arguments to pass to the `SESSION_STORE_CLASS` constructor.
# SESSION_STORE_ARGS = {
#     "path": "./sessions"
# }

# Directory that holds configuration.
# CONF_SOURCE = "conf"

# Class that manages how configuration is loaded: Kedro's OmegaConfigLoader, whose
# parameters also take params.yaml (DVC's experiment overlay: non-null values above the
# environment, below --params) and fill the shared values (encoder, seed, on_bad_input)
# into the keys a block leaves null (configuration/loader.py).
from contrastive_sentence_embeddings.configuration.loader import (  # noqa: E402
    CONFIG_LOADER_ARGS,  # keyword arguments to the loader's constructor (defined with it)
    ProjectConfigLoader,
)

CONFIG_LOADER_CLASS = ProjectConfigLoader

# Class that manages Kedro's library components.
# from kedro.framework.context import KedroContext
# CONTEXT_CLASS = KedroContext

# Class that manages the Data Catalog.
# from kedro.io import DataCatalog
# DATA_CATALOG_CLASS = DataCatalog
