# %% [markdown]
# # Lesson 13 — When RL does not learn
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/rl-for-llms/course/blob/main/notebooks/13_debugging.ipynb)
#
# *Fast mode (`COURSE_FAST=1`), as the notebook test runs it: 99 s of CPU time, measured on a
# 2-core CPU, 48 s of it section 4's museum runs and their fixes; the wall time grows with the
# machine's load.*
#
# "Why is my loss 0?", "why is the reward flat?", "why did it collapse?" are the questions
# people ask most about GRPO runs. The trainers log the signals that answer them
# (`frac_reward_zero_std`, `completions/clipped_ratio`, clip fractions, entropy, KL, the
# sampler's log-prob gap) and leave the reading to you. This lesson teaches the reading.
#
# In this lesson you will:
# 1. meet the **run doctor** (`course_lib.doctor`): one small rule per common failure, each
#    naming the cause and the fix, run live by the trainer and after the fact by
#    `python -m course_lib doctor RUN_DIR` (a TRL `trainer_state.json` works too);
# 2. walk through the **failure museum**: tiny runs broken on purpose, their curves, the
#    doctor's diagnosis, and the curves after the fix;
# 3. name failures from dashboards yourself, and write a doctor rule;
# 4. learn two of DAPO's remedies: **dynamic sampling** (drop the groups whose rewards are
#    all equal and sample more) and the **soft overlong punishment**.

# %%
# On Colab (or with COURSE_SETUP=1): clone the course, install what the runtime lacks, keep its torch.
# COURSE_REPO_URL and COURSE_DIR choose another repository or folder (README, "On Colab").
import importlib, importlib.util, os, subprocess, sys  # noqa: E401

if importlib.util.find_spec("course_lib") is None:
    on_colab = "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ
    if not (on_colab or os.environ.get("COURSE_SETUP") == "1"):
        raise ModuleNotFoundError("course_lib is not installed for this kernel: run `make lab` in the course folder, "
                                  "or set COURSE_SETUP=1 to clone and install it into this Python.")
    course_dir = os.environ.get("COURSE_DIR", "/content/course")
    if not os.path.isdir(course_dir):
        url = os.environ.get("COURSE_REPO_URL", "https://github.com/rl-for-llms/course")
        subprocess.run(["git", "clone", "-q", "--depth", "1", url, course_dir], check=True)
    subprocess.run([sys.executable, "-m", "course_lib.colab"], cwd=course_dir, check=True)
    sys.path.insert(0, course_dir)
    importlib.invalidate_caches()

# %%
# %matplotlib inline
import warnings
from pathlib import Path

from IPython.display import display

from course_lib.doctor import RULES, diagnose
from course_lib.museum import EXHIBITS, run_exhibit
from course_lib.machine import fast_mode, scaled
from course_lib.run.history import load_history
from course_lib.widgets.dashboard import plot_training_history

warnings.filterwarnings("ignore")  # the broken runs warn a lot; the doctor says it better
RUNS = Path(os.environ.get("COURSE_OUTPUT", "outputs")) / "13_debugging"  # one folder a run, replaced on a re-run
print("fast mode:", fast_mode())

# %% [markdown]
# ## 1. The doctor's rules
#
# A rule is a small pure function over the logged rows (one dict per optimizer step, TRL's
# metric names) and the run's config. It reads a few signals, compares them with thresholds
# that each carry their reason, and returns a message naming the likely cause and the fix
# (a config field and a value, or a lesson). Severity: **info** (normal behaviour that looks
# alarming), **warning** (compute wasted or drifting), **error** (the run cannot learn or is
# breaking; `doctor="stop"` ends it). The table lists them all; `course_lib/doctor/rules.py`,
# `rules_hacking.py`, `rules_step_size.py` and `rules_policy.py` are short enough to read top to bottom.
#
# Each rule also has a **stage**, its place in a causal order: the optimizer and learning
# rate, then sampling, then the rewards, then the data (groups all alike), then the budget
# (length and time); last come *symptoms* (the update does nothing, the rule names what
# caused it) and normal behaviour (info). A learning rate that is too large changes what the
# model samples, which can empty every reward's spread, which wastes the budget; never the
# other way round. The report lists findings in this order, so its first line is the one to
# act on.

# %%
for spec in RULES.values():
    print(f"{spec.severity:7s} {spec.name:26s} [{spec.stage}] reads {', '.join(spec.signals)}")
    print(f"        {spec.summary}")
    for key, (value, why) in spec.thresholds.items():
        print(f"          {key} = {value:g}: {why}")

# %% [markdown]
# ## 2. Four broken runs: name the failure (exercise 1)
#
# Each dashboard below is a real run of the tiny model on two-digit addition, broken in one
# way (the museum, `course_lib.museum`; fast mode stops each run a few steps after the
# doctor's findings fired, full mode runs the museum's lengths). The doctor's markers are
# hidden. For each, find the curve that no healthy run shows. Healthy values for this model
# (the museum's `healthy_grpo` run trained for 200 steps, means over steps 1-30 and over
# steps 171-200): reward about 0.18 rising to 0.27, `frac_reward_zero_std` about 0.26
# falling to 0.18, entropy 0.69 to 0.61 nats, clip fraction 0 (one pass per batch) to a few
# percent, `completions/clipped_ratio` 0, sampler gap 0 (the same model samples and trains).
# A reward in that band is not enough to call a run healthy: read it with the others.

# %%
PANELS = ["reward", "frac_reward_zero_std", "entropy", "grad_norm", "clip_ratio/region_mean",
          "completions/clipped_ratio", "completions/mean_length", "sampling/sampling_logp_difference/mean"]
MYSTERY = {"A": "learning_rate_100x", "B": "short_budget", "C": "stale_sampler", "D": "near_greedy"}
# Fast mode stops these runs a few steps after the doctor's findings fired; full mode runs the museum's lengths.
STEPS = {"learning_rate_100x": scaled(10, 30), "short_budget": scaled(8, 20), "stale_sampler": scaled(6, 30),
         "near_greedy": scaled(20, 30)}
histories = {}
for letter, name in MYSTERY.items():
    rows, config = run_exhibit(name, RUNS / name, max_steps=STEPS[name])
    histories[name] = (rows, config)
    keys = [k for k in PANELS if any(k in r for r in rows)]
    display(plot_training_history(rows, keys=keys, columns=4, title=f"Dashboard {letter}"))

# %% [markdown]
# Open `exercises/ex13_debugging.py` and fill in `name_the_failures()`: one of `FAILURES`
# for each dashboard. The check says which dashboard is wrong and which curve to look at.

# %%
from course_lib.checks import ex13
from course_lib.feedback import feedback
from course_lib.grading import load_exercise

ex = load_exercise("ex13_debugging")
feedback(lambda fn: ex13.check_name_the_failures(fn, ex.FAILURES), ex.name_the_failures);

# %% [markdown]
# ## 3. What the doctor says, and the fix
#
# The trainer ran the doctor every `logging_steps` (`doctor="warn"`, the default): each
# finding was printed once, when it first fired, and written to `history.jsonl` as a row of
# type `"doctor"`. Here is its report for each run, from the saved folders, as
# `python -m course_lib doctor RUN_DIR` prints it; the figure beside each report shows the
# signals behind each finding and where it fired.

# %%
from course_lib.doctor.report import doctor_run

for letter, name in MYSTERY.items():
    findings, text, figure = doctor_run(RUNS / name, figure=RUNS / f"{name}.png")
    print(f"--- dashboard {letter}: {EXHIBITS[name].story}\n{text}\n")

# %% [markdown]
# Several rules fire on one run because one cause has several symptoms: a learning rate
# 100x too high first clips most of each update (`policy_moves_too_fast`), then the policy
# degenerates: it stops finishing its answers, every group fails alike, and the gradient
# vanishes. The report puts the most **upstream** finding first (the causal order of
# section 1): act on it. The findings below it describe symptoms, and the fixes they name
# answer the symptom, not the cause: after a learning rate that destroyed the model, "remove
# the constant reward" (it is the only correctness reward, constant because the model now
# fails everything) or "raise `num_generations`" would be wrong. Fix the cause, rerun, and
# read what is left.
#
# On dashboard D, `zero_spread_groups` does not stop at the mean reward (about 0.35): a mean
# reads as a success rate p only for a 0/1 reward (the rule checks that each batch's standard
# deviation is sqrt(p(1-p))), and then with independent samples a group of G is all alike
# with probability p^G + (1-p)^G, here 0.35^8 + 0.65^8 = 3%, against the 83% logged. When the
# observed share is that far above the prediction, the samples are not independent: the
# group's completions are copies of one another (a temperature near 0, or a collapsed
# policy), and the fix is more diversity, not easier problems or more generations. The rule
# says so, and names a larger `num_generations` only when the data is the likely cause.
#
# Now apply two fixes the doctor named and compare the curves. For `short_budget` the doctor
# says double the budget (2 -> 4 tokens); the cell gives 8, since the answers need 3-4 tokens
# and their end-of-sequence token, the value the doctor reaches by doubling twice.
# For `near_greedy` the fix, temperature 1.0, is the preset's own value: the fixed run *is*
# the museum's `healthy_grpo` run. The cell trains that run once and reads as many of its
# first steps as the broken run has: with a constant learning rate and a fixed seed a run is
# the same step for step whatever its `max_steps` (only the timings differ), so the same run
# stands beside every broken run that a fix turns back into the preset (three more in
# section 4).
# The dashboard marks the
# findings (dashed lines, coloured by severity) on the curves each rule reads.

# %%
# The preset's own run, as long as the longest broken run that a fix turns back into it (frozen's,
# section 4; fast mode runs it for 30 steps instead of 40, all its rule needs).
HEALTHY_STEPS = scaled(30, 40)
healthy_rows, healthy_config = run_exhibit("healthy_grpo", RUNS / "healthy_grpo", max_steps=HEALTHY_STEPS)


def first_steps(rows, steps):
    """The rows of a run's first `steps` optimizer steps."""
    return [r for r in rows if r.get("step", 0) <= steps]


for name, fix in (("short_budget", {"max_completion_length": 8}), ("near_greedy", {"temperature": 1.0})):
    if name == "near_greedy":  # temperature 1.0 is the preset's: the fixed run is the healthy one
        after = first_steps(load_history(RUNS / "healthy_grpo"), histories[name][1].max_steps)
    else:
        run_exhibit(name, RUNS / f"{name}-fixed", max_steps=STEPS[name], **fix)
        after = load_history(RUNS / f"{name}-fixed")
    keys = ["reward", "frac_reward_zero_std", "entropy", "completions/clipped_ratio"]
    display(plot_training_history(RUNS / name / "history.jsonl", keys=keys, columns=4, title=f"{name}: before"))
    display(plot_training_history(after, keys=keys, columns=4, title=f"{name}: after {fix}"))
    fired = [f.rule for f in diagnose(after) if f.severity != "info"]
    print(f"{name} after {fix}: warnings and errors: {fired or 'none'}")

# %% [markdown]
# ## 4. The whole museum
#
# Four broken runs are not the museum. Here are the other nine, each with the curves its rule
# reads (the dashboard, the doctor's findings marked) and what the doctor said: for each
# finding above "info", its first sentence and the fix it names. The live doctor's printout
# is captured to keep the page short; the report below is the same findings, dated at the
# first step each fired (`first_firing`, what `python -m course_lib doctor` prints).

# %%
import contextlib
import io
import textwrap

from course_lib.doctor.report import first_firing


def signal_keys(rule_names, rows):
    """The logged metrics the rules read (a `<name>` pattern: every reward function's)."""
    keys = []
    for rule_name in rule_names:
        for signal in RULES[rule_name].signals:
            if "<name>" in signal:
                prefix, suffix = signal.split("<name>")
                found = sorted({k for r in rows for k in r if k.startswith(prefix) and k.endswith(suffix)})
            else:
                found = [signal] if any(signal in r for r in rows) else []
            keys += [k for k in found if k not in keys]
    return keys


def train_quietly(name, folder, **fix):
    """Run a museum exhibit with its live doctor's printout captured; return (rows, config)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return run_exhibit(name, folder, **fix)


def say(findings, expected=()):
    """Each finding above info (and the expected ones): severity, rule, step, first sentence, the fix."""
    shown = [f for f in findings if f.severity != "info" or f.rule in expected]
    for f in shown:
        first, _, rest = f.message.partition(". ")
        fix = rest[rest.find("Fix"):] if "Fix" in rest else ""
        print(textwrap.fill(f"{f.severity.upper()} {f.rule} (step {f.step}): {first}. {fix}", 110,
                            subsequent_indent="    "))
    return shown


REST = [name for name, e in EXHIBITS.items() if e.expect and name not in MYSTERY.values()]
# Fast mode: frozen runs the 30 steps nothing_moves reads (full mode: the museum's 40), and the others
# stop a few steps after their findings fired.
STEPS.update(frozen=HEALTHY_STEPS, constant_reward=scaled(5, 10), dead_second_reward=scaled(5, 10),
             raw_units_reward=scaled(6, 10), length_paid=scaled(55, 60), kl_runaway=scaled(5, 10),
             learning_rate_300x=scaled(13, 30), long_rollouts=scaled(3, 6))
museum = {}
for name in REST:
    rows, config = train_quietly(name, RUNS / name, max_steps=STEPS.get(name, EXHIBITS[name].overrides["max_steps"]))
    findings = first_firing(rows, config.to_dict())
    museum[name] = (rows, config, findings)
    expect = EXHIBITS[name].expect
    keys = signal_keys(expect, rows) + [k for k in ("reward",) if k not in signal_keys(expect, rows)]
    display(plot_training_history(RUNS / name / "history.jsonl", keys=keys, columns=4, title=name))
    print(f"--- {name}: {EXHIBITS[name].story}")
    say(findings, expect)
    missing = [r for r in expect if r not in {f.rule for f in findings}]
    print(f"the museum expects {', '.join(expect)}: {'all fired' if not missing else 'not fired: ' + ', '.join(missing)}\n")

gen_rows = [r for r in museum["long_rollouts"][0] if "timing/step_s" in r]
share = sum(r["timing/generation_s"] for r in gen_rows) / sum(r["timing/step_s"] for r in gen_rows)
print(f"long_rollouts: generation took {share:.0%} of the step time "
      f"(generation_dominates speaks above {RULES['generation_dominates'].threshold('share'):.0%})")

# %% [markdown]
# Read them as the doctor does, cause first:
#
# - **constant_reward**: every group's rewards are equal, so every advantage, the loss and the
#   gradient are 0. Three rules fire on one cause: `no_learning_signal` (the error) says the
#   groups are alike, `zero_spread_groups` reads the reward as a success rate of 1 (every
#   completion "right"), and `dead_reward_function` names the function.
# - **dead_second_reward**: the run has a signal (the 0/1 correctness still spreads), but the
#   second function adds nothing to any advantage. `dead_reward_function` is info: a constant
#   added to every completion changes no advantage and costs nothing, so it is worth a look
#   (a parser that never matches?) rather than a failure; it is also what a guard the model
#   always satisfies looks like (lesson 11's `tidy_rubric` on the tiny model). A function
#   that varied and is constant now is *saturated*, learned, and not reported. GRPO's loss
#   near 0 is info too.
# - **raw_units_reward**: a reward in raw units (0 to -100) beside a 0/1 one. The weighted
#   sum's spread is almost all the distance reward's, so the advantages ignore correctness.
# - **length_paid**: reward and completion length rise together: the run is paid for
#   writing more. The same pair of curves is also what a *healthy* reasoning run shows (in
#   DeepSeek-R1-Zero the answers grow longer as the reward rises), so before calling it
#   hacking, check whether correctness rises within each length bucket, or on held-out
#   problems; here a reward that pays per character leaves no doubt.
# - **kl_runaway** and **learning_rate_300x**: a learning rate 100-300x the preset's. On-policy
#   the clip never binds, so the KL to the reference is what shows the policy leaving; at 300x
#   the entropy explodes and the model writes noise, which then also fails every answer.
# - **frozen**: nothing is wrong on any one curve; reward, entropy, clip and KL all wander
#   inside their noise. `nothing_moves` fires on that flatness, with a summed learning rate
#   (1e-9 a step here) small enough to explain it; the sum alone proves nothing on a larger
#   model (question 5).
# - **long_rollouts**: the run is healthy but slow; `generation_dominates` is info (speed
#   advice) and reads wall-clock times, so on a busy machine the share can fall under its
#   line at half of a step (the printout says whether it fired here).
# - **nan_reward**: a non-finite reward is an error at the first step (`doctor="stop"` would
#   end the run there). Loss and gradient are 0 from then on, and `no_learning_signal` fires
#   too; both findings name the reward (no completion got a number) and the same fix, make a
#   reward function return a number for each completion. The earliest, `non_finite_values`
#   at step 1, is still the one to act on.
#
# ### The fixes, and the curves after them
#
# One fix per kind of failure, each the one the doctor named, applied with `run_exhibit`'s
# keyword arguments (config values set last): the preset's learning rate for the runs that
# move too fast and for the frozen one; a weight that brings the raw-units reward to the 0/1
# scale (`reward_weights`); and the dead reward removed (the same run with the correctness
# reward alone, the museum's healthy GRPO run for as many steps). Three of these fixes give
# back the preset exactly (`learning_rate_300x` and `frozen` at the preset's rate, and the
# dead reward removed): their "after" is section 3's healthy run, read for as many steps as
# the broken run. Each panel draws a signal the rule reads, before and after.

# %%
import matplotlib.pyplot as plt

from course_lib.presets import run_settings

preset_lr = run_settings("tiny", "arithmetic", "grpo")["learning_rate"]
FIXES = [  # (broken exhibit, the fix in words, the exhibit to run, its config values; None: the preset's run)
    ("kl_runaway", f"learning_rate={preset_lr:g} (the preset's)", "kl_runaway", {"learning_rate": preset_lr}),
    ("learning_rate_300x", f"learning_rate={preset_lr:g} (the preset's)", None, None),
    ("raw_units_reward", "reward_weights=[1.0, 0.01]: the distance in hundreds", "raw_units_reward",
     {"reward_weights": [1.0, 0.01]}),
    ("dead_second_reward", "the constant reward removed", None, None),
    ("frozen", f"learning_rate={preset_lr:g} (the preset's)", None, None),
]


def before_after(before, after, keys, title):
    """One panel per signal: the broken run and the fixed one on the same axes."""
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 2.4), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for rows, label in ((before, "before"), (after, "after")):
            points = [(r["step"], r[key]) for r in rows if "type" not in r and isinstance(r.get(key), (int, float))]
            if points:
                ax.plot(*zip(*points), marker=".", markersize=3, label=label)
        ax.set_title(key, fontsize=8)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    plt.show()


def spread_share(rows, config, exhibit):
    """Add each step's share of the weighted reward spread (weight x std) per reward function."""
    names = [r if isinstance(r, str) else r.__name__ for r in EXHIBITS[exhibit].rewards]
    weights = config.check_reward_weights(len(names))
    for r in (r for r in rows if "type" not in r):
        spread = [w * r.get(f"rewards/{n}/std", float("nan")) for w, n in zip(weights, names)]
        for n, part in zip(names, spread):
            r[f"share of spread: {n}"] = part / sum(spread) if sum(spread) > 0 else float("nan")
    return [f"share of spread: {n}" for n in names]


for broken, words, exhibit, fix in FIXES:
    before_rows, _, before_findings = museum[broken]
    if exhibit is None:  # the fix gives back the preset: the healthy run of section 3, as many steps as the broken one
        after_rows, after_config = first_steps(healthy_rows, museum[broken][1].max_steps), healthy_config
    else:
        after_rows, after_config = train_quietly(exhibit, RUNS / f"{broken}-fixed",
                                                 max_steps=museum[broken][1].max_steps, **fix)
    after_findings = first_firing(after_rows, after_config.to_dict())
    keys = signal_keys(EXHIBITS[broken].expect, before_rows)
    if "dominant_reward_function" in EXHIBITS[broken].expect:  # the rule reads weight x std, so draw that
        keys = spread_share(before_rows, museum[broken][1], broken)
        spread_share(after_rows, after_config, exhibit)
    keys += [k for k in ("reward", "entropy") if k not in keys]
    before_after(before_rows, after_rows, keys[:5], f"{broken}: before, and after {words}")
    fired = [f"{f.severity} {f.rule}" for f in after_findings]
    print(f"{broken} after {words}: the doctor says {', '.join(fired) or 'nothing'}")
    if broken == "dead_second_reward":
        pairs = [(a, b) for a in before_rows for b in after_rows
                 if "type" not in a and "type" not in b and a["step"] == b["step"]]
        same = max(abs(a["grad_norm"] - b["grad_norm"]) for a, b in pairs)
        gap = {round(a["reward"] - b["reward"], 6) for a, b in pairs}
        print(f"    reward before minus after, per step: {sorted(gap)}; largest grad_norm difference: {same:.2g}")

# %% [markdown]
# After each fix the doctor is silent, or says only the info that GRPO's loss near 0 is
# normal. What the curves say about each fix:
#
# - **Learning rate too high**: at the preset's rate the KL to the reference stays near 0 and
#   the entropy stays where it started, and the reward is no longer stuck at 0. The doctor's
#   first suggestion is a tenth of the rate; the preset's, 100-300x lower here, is the value
#   measured to learn on this model (`course_lib.presets`). A tenth of a 300x rate is still
#   30x: if the finding fires again, follow it again.
# - **Raw units**: the per-function rewards are the same before and after (a weight does not
#   change what a function returns); what changes is each one's share of the weighted spread,
#   the quantity the rule reads, and the correctness reward now carries most of it at most
#   steps.
# - **Dead reward**: removing it changes nothing but the reward's offset: the printed
#   differences show the reward lower by the constant at every step and the same gradients,
#   step for step. A constant reward never taught anything; it only hid in the sum.
# - **Frozen**: the curves after look much like the curves before. Over 40 steps (30 in fast
#   mode, the rows `nothing_moves` reads) the preset's rate moves the tiny model little more
#   than noise, which is exactly why `nothing_moves` reads the summed learning rate rather
#   than the curves (question 5): the doctor is silent because the weights can now move, and
#   a longer run shows whether they move the right way.
# - `reward_weights` rescales; `multi_objective_aggregation="normalize_then_sum"` (the
#   doctor's other suggestion) normalises each function within its group before the sum, so
#   no function can dominate by its units. The dead reward has no weight that helps: remove
#   it, or fix what it parses.
#
# Which rule fires on which run, the healthy runs included (none above info may fire there):
# `benchmarks/doctor_museum.py` prints that confusion matrix, and `benchmarks/README.md`
# holds the measured one; `tests/lib/test_doctor_museum.py` replays the museum.

# %% [markdown]
# ## 5. Write a doctor rule (exercise 2)
#
# A rule is ten lines: read a signal over a recent window, compare, say the fix. Fill in
# `truncation_rule(rows, config)` in `exercises/ex13_debugging.py` (its docstring has the
# exact contract), then run it on the museum's `short_budget` run and on the fixed one.

# %%
ex = load_exercise("ex13_debugging")
if feedback(ex13.check_truncation_rule, ex.truncation_rule):
    for name in ("short_budget", "short_budget-fixed"):
        rows = [r for r in load_history(RUNS / name) if "type" not in r]
        print(f"{name}: {ex.truncation_rule(rows, {'max_completion_length': 2 if 'fixed' not in name else 8})}")

# %% [markdown]
# ## 6. Two remedies from DAPO
#
# **Dynamic sampling.** A group whose G rewards are all equal has advantage 0 for every
# completion: its generations cost compute and teach nothing. For a 0/1 reward with success
# rate p, a group is all-equal with probability p^G + (1-p)^G: at p = 0.3 that is 25% of
# groups with G = 4 and 6% with G = 8. DAPO (Yu et al. 2025) samples, **drops** those groups
# and **samples more prompts** until the batch is full of groups with a spread, or a cap on
# the rounds is reached; a batch still short at the cap is completed with zero-spread groups.
# `dynamic_sampling=True` does this (verl's name for the cap on rounds, `max_num_gen_batches`,
# is kept); TRL 1.16 has no equivalent. The metrics `dynamic_sampling/num_gen_batches`
# (rounds used) and `dynamic_sampling/groups_dropped` say what it cost. Here on the
# near-greedy run, where most groups are alike:

# %%
# Fast mode samples for the first 5 steps only (each takes up to 4 rounds) and compares them
# with the same steps of the plain run; full mode runs all 30.
rows_ds, rows_ds_config = run_exhibit("near_greedy", RUNS / "near_greedy-dynamic", dynamic_sampling=True,
                                      max_num_gen_batches=4, max_steps=scaled(5, 30))
plain = histories["near_greedy"][0][:len(rows_ds)]
mean = lambda rows, key: sum(r[key] for r in rows) / len(rows)  # noqa: E731
print(f"frac_reward_zero_std of the trained batches: {mean(plain, 'frac_reward_zero_std'):.2f} without, "
      f"{mean(rows_ds, 'frac_reward_zero_std'):.2f} with dynamic sampling")
print(f"generation rounds per batch: {mean(rows_ds, 'dynamic_sampling/num_gen_batches'):.2f} "
      f"(cap {rows_ds_config.max_num_gen_batches}); groups topped up with zero spread at the cap: "
      f"{mean(rows_ds, 'dynamic_sampling/groups_refilled_with_zero_spread'):.1f} a batch; "
      f"tokens through the sampler: {plain[-1]['num_tokens']:,} without, {rows_ds[-1]['num_tokens']:,} with")

# %% [markdown]
# Dynamic sampling trades sampler time for signal, and here the cap decides how much: on this
# near-greedy run (full mode: 0.78 of the groups alike without it, 0.35 with it, 3.87 rounds
# of the 4 allowed, 3.9 times the sampled tokens) the cap bound at almost every step, and
# about a third of the trained groups still carried no gradient. Only when the batch fills
# before the cap does every trained group carry one. Whether that buys more held-out accuracy per token
# or per minute depends on how many groups are alike; `benchmarks/dynamic_sampling.py`
# measures it on the tiny model (see its table in `benchmarks/README.md`).
#
# **Soft overlong punishment.** A completion cut at `max_completion_length` is scored as if
# it were finished, so a correct but long reasoning chain is punished for its length, not
# its content. DAPO adds a reward that is 0 up to `L_max - L_cache` tokens, falls linearly to
# -1 over the last `L_cache` tokens of the budget, and is -1 beyond (eq. 13 of the paper).
# `course_lib.rewards.soft_overlong_punishment(L_max, L_cache)` gives TRL's values; add it to
# the reward functions. Its companion, `mask_truncated_completions=True`, removes truncated
# completions from the loss altogether (lesson 06).

# %%
import matplotlib.pyplot as plt

from course_lib.rewards import soft_overlong_punishment

L_max, L_cache = 100, 20
lengths = list(range(0, 121))
penalty = soft_overlong_punishment(L_max, L_cache)(completion_ids=[[0] * n for n in lengths])
fig, ax = plt.subplots(figsize=(6, 2.6))
ax.plot(lengths, penalty)
ax.axvline(L_max - L_cache, color="0.6", linestyle=":", label="L_max - L_cache")
ax.axvline(L_max, color="0.3", linestyle="--", label="L_max")
ax.set_xlabel("completion length (tokens)")
ax.set_ylabel("reward")
ax.set_title("DAPO's soft overlong punishment (L_max=100, L_cache=20)")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 7. The doctor on your own runs
#
# - **Live**: every run of `course_lib.trainer.Trainer` has the doctor on (`doctor="warn"`).
#   `doctor="stop"` ends a run (checkpoint saved) at its first error-level finding;
#   `doctor="off"` skips it. `trainer.doctor.on_finding = dashboard.update` marks findings on a
#   `LiveDashboard` as they fire.
# - **After the fact**: `python -m course_lib doctor outputs/my_run` prints the report and
#   saves `doctor.png`; point it at a TRL run's `trainer_state.json` (or its output folder) and
#   the same rules read TRL's log, whose metric names match. An empty or unreadable history
#   exits with status 2 and says why, never as a clean run; a log without rewards (SFT, DPO)
#   is told that the RL rules do not apply. Steps are read from each row's `step`: with TRL's
#   default `logging_steps=10`, `nothing_moves` weighs each row's learning rate by the 10
#   optimizer steps it stands for and reports optimizer steps. The windows ("the last 10",
#   "the first 3") still count *logged rows*, so with `logging_steps=10` a window of 10 rows
#   spans 100 steps: log more often (`logging_steps=1`) when the doctor is to read a short run.
#   A log whose rows each average several steps gets an info finding, `too_few_rows`, naming
#   the rules that read a trend and have too few rows to read it yet (their silence says
#   nothing), and the rules read such rows as averages: a 0/1 reward's logged std is the mean
#   of its batches' stds, and a row with every group alike and no KL logged had no gradient.
# - **Live in TRL**: `course_lib.doctor.DoctorCallback` is a `transformers.TrainerCallback`.
#   `GRPOTrainer(..., callbacks=[DoctorCallback()])` (or `RLOOTrainer`) runs the same rules
#   at every log, prints each finding once, writes it into the trainer's `log_history` and
#   into `OUTPUT_DIR/doctor.jsonl` as it fires (a run killed before saving keeps its
#   findings); `DoctorCallback(stop=True)` ends training on an error.
# - **Calibrated on a tiny model**: the thresholds were measured on the museum's 0.9M-parameter
#   model and checked on a second museum of runs the rules were not written on (this trainer
#   and TRL's `GRPOTrainer`, on the tiny model: `benchmarks/doctor_museum.py --museum2`),
#   then on a third set trained and labelled before the last revision (`--museum3`): there the
#   first finding was right for 4 of 7 broken runs before that revision and 6 of 7 after it,
#   and all 5 healthy runs stay quiet (four SmolLM2 runs added after it and scored once: 2 of 2
#   broken named, `make demo` quiet on a CPU and on a GPU); the run it still misses samples at temperature 0.3,
#   with a third of its groups alike, fewer than the half a warning needs. On a larger model
#   treat a finding as a question to check, not a verdict: 30
#   AdamW steps at 1e-6 (a summed rate of 3e-5) toward four fixed completions raised their
#   log-probs under SmolLM2-135M by 6 to 8 nats (question 5). A KL to the reference that drifts
#   slowly over thousands of steps is not a step that is too large: `policy_moves_too_fast`
#   fires on a rise of 0.5 nats within 20 optimizer steps, not on the drift. Entropy that
#   falls *after* the reward rose is a policy that learned (not `entropy_collapse`), a reward
#   that varied and is now constant is saturated (not dead), and reward rising with length is
#   hacking only when a function pays for length (an R1-Zero-like run's 0/1 correctness
#   rising with longer answers is learning). Held-out accuracy is "flat" only over thirds of at
#   least 3 evaluations, and a sampled 0/1 reward that rises while it stays under the greedy
#   held-out accuracy is the policy sharpening toward its greedy answer, not hacking. The
#   sampler rule reads the share of completion tokens whose sampler/trainer ratio leaves
#   [0.5, 2] (`sampling/token_ratio_outside_band`, logged by this trainer: a bfloat16 sampler
#   keeps it under 1%, stale weights put 15-47% outside), and the mean gap where it is absent.
# - **Not every finding is a bug**: `loss_near_zero_is_normal` is info on purpose. On-policy
#   GRPO's loss is minus the mean advantage, and group advantages sum to 0: the loss sits near
#   0 while the gradient does the work.

# %% [markdown]
# ## Questions
#
# 1. A GRPO run logs `loss` = 0.0000 and `grad_norm` = 3.1 at every step. Is it learning?
#    Which two metrics would you read to find out?
# 2. The tiny model solves 90% of the training problems and you use 4 completions per
#    prompt. What fraction of groups carry no signal, and how many completions per prompt
#    would bring it under 25%?
# 3. `completions/clipped_ratio` is 0.97 and `completions/mean_terminated_length` is 0.
#    Why would doubling `max_completion_length` probably not help, and what would?
# 4. Training reward rose from 0.3 to 0.8 in 200 steps while held-out greedy accuracy stayed
#    at 31%. Name two explanations and the check that tells them apart.
# 5. Why does the doctor's `nothing_moves` rule use the sum of the learning rates instead of
#    the entropy's change alone? What would go wrong on the tiny model with the entropy alone?
# 6. Dynamic sampling kept the trained batches free of zero-spread groups but used 2.4
#    generation rounds per batch. When does it pay for itself, and when is raising
#    `num_generations` the better fix?

# %% [markdown]
# ### Answers
#
# Try each question on your own first. Then reveal an answer: `show_answer("13", k)`
# prints the answer to question k (`show_answer("13")` prints them all). They are also in
# `notebooks/answers/13_debugging.md`.

# %%
from course_lib.lesson_answers import show_answer

# show_answer("13", 1)
