"""Plots and interactive explorers of the lessons.

Each explorer is two layers: a pure plotting function that returns a matplotlib
`Figure` (nothing is shown; under `MPLBACKEND=Agg` it runs headless, and tests read its
data back), and a thin `*_explorer()` / `*_playground()` wrapper that wires ipywidgets
controls to it. The numbers always come from the library's own maths
(`course_lib.algos`, `course_lib.ops`, `schedule`, `rewards`), so a
plot cannot disagree with the trainer.

| lesson | module: plotting function | explorer |
|---|---|---|
| 03, 06 | `clipping.py`: `plot_clip_objective`, `plot_sequence_ratio`, `plot_loss_weights` | `clip_explorer` |
| 03, 06 | `kl.py`: `plot_kl_estimators` | `kl_explorer` |
| 04, 08, 11 | `dashboard.py`: `plot_training_history`, `load_history` | `LiveDashboard` |
| 05 | `advantage.py`: `plot_advantages` | `advantage_explorer` |
| 06 | `normalization.py`: `plot_loss_normalization` | `normalization_explorer` |
| 07 | `schedule.py`: `plot_schedule` (`SCHEDULE_PRESETS`) | `schedule_explorer` |
| 09 | `rewards_playground.py`: `plot_reward_breakdown` | `reward_playground` |
| 10 | `memory.py`: `logits_memory_gb`, `kv_cache_gb`, `measure_logprob_memory`, `plot_memory_vs_chunk_size` | — |
| 12 | `trajectory.py`: `plot_trajectory_tokens`, `token_cells` | — |

ipywidgets is imported only when an explorer is built. Under IPython, importing this
package lets a cell that ends with a returned figure show it (`enable_notebook_display`):
the figures are not pyplot figures, so `plt.show()` does not show them.
"""

from ..common.figures import enable_notebook_display
from .advantage import advantage_explorer, compute_advantage_panels, plot_advantages
from .clipping import (ClipCurve, clip_curve, clip_explorer, loss_weight_curve, plot_clip_objective, plot_loss_weights,
                       plot_sequence_ratio, sequence_clip_maps)
from .dashboard import DEFAULT_PANELS, LiveDashboard, load_history, metric_series, plot_training_history
from .kl import kl_estimator_samples, kl_estimator_stats, kl_explorer, plot_kl_estimators
from .memory import kv_cache_gb, logits_memory_gb, measure_logprob_memory, plot_memory_vs_chunk_size
from .normalization import normalization_explorer, per_token_weights, plot_loss_normalization
from .rewards_playground import EXAMPLE_COMPLETIONS, plot_reward_breakdown, reward_breakdown, reward_playground
from .schedule import SCHEDULE_PRESETS, plot_schedule, schedule_explorer, schedule_formulas, schedule_grid
from .trajectory import plot_trajectory_tokens, token_cells

__all__ = [
    "DEFAULT_PANELS",
    "EXAMPLE_COMPLETIONS",
    "SCHEDULE_PRESETS",
    "ClipCurve",
    "LiveDashboard",
    "advantage_explorer",
    "clip_curve",
    "clip_explorer",
    "loss_weight_curve",
    "compute_advantage_panels",
    "enable_notebook_display",
    "kl_estimator_samples",
    "kl_estimator_stats",
    "kl_explorer",
    "kv_cache_gb",
    "load_history",
    "logits_memory_gb",
    "measure_logprob_memory",
    "metric_series",
    "normalization_explorer",
    "per_token_weights",
    "plot_advantages",
    "plot_clip_objective",
    "plot_loss_weights",
    "plot_kl_estimators",
    "plot_loss_normalization",
    "plot_memory_vs_chunk_size",
    "plot_reward_breakdown",
    "plot_schedule",
    "plot_sequence_ratio",
    "plot_training_history",
    "plot_trajectory_tokens",
    "reward_breakdown",
    "reward_playground",
    "schedule_explorer",
    "schedule_formulas",
    "schedule_grid",
    "sequence_clip_maps",
    "token_cells",
]

enable_notebook_display()
