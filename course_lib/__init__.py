"""The library the lessons import: where each formula a lesson teaches lives.

One line a formula, ``lesson: formula -> file: function``; the file is the one to open,
the function is the formula (``tests/lib/test_packaging.py`` checks that every name
resolves and that the README's module table names every file listed here).

01 rl basics: bandit action values, epsilon-greedy, UCB1, gradient bandit -> course_lib/toy/bandits.py: EpsilonGreedy, UCB1, GradientBandit
01 rl basics: verifier vs reward -> course_lib/toy/answer_policy.py: verify_answer, is_number_reward, correctness_reward
02 policy gradients: REINFORCE with discounted returns -> course_lib/toy/gridworld_agents.py: reinforce
02 policy gradients: baselines and gradient variance -> course_lib/toy/variance.py: exact_policy_gradient, gradient_variance
03 ppo: clipped surrogate -min(rA, clip(r, 1-eps, 1+eps)A) -> course_lib/algos/ppo.py: ppo_policy_loss
03 ppo: generalised advantage estimation -> course_lib/algos/ppo.py: gae
04 rlhf ppo: Bradley-Terry reward model -> course_lib/reward_model.py: bradley_terry_loss
04 rlhf ppo: KL folded into the reward, missing-EOS penalty -> course_lib/algos/onpolicy.py: kl_penalized_rewards, penalize_missing_eos
04 rlhf ppo: whitened advantages, clipped value loss -> course_lib/algos/ppo.py: ppo_advantages, whiten, value_loss
05 grpo: group-relative advantage (r - mean) / (std + eps) -> course_lib/algos/grpo.py: group_advantages
05 grpo: the GRPO loss (clipped surrogate, KL, aggregation) -> course_lib/algos/grpo.py: policy_loss
05 grpo: the clipped surrogate -min(rA, clip(r, 1-eps, 1+eps_high)A) and the loss-type table -> course_lib/algos/grpo.py: clipped_surrogate, LOSSES
05 grpo: k1 / k2 / k3 KL estimators -> course_lib/ops/kl.py: kl_k1, kl_k2, kl_k3
06 grpo variants: grpo / bnpo / dr_grpo / dapo / luspo averaging -> course_lib/algos/grpo_losses.py: sequence_mean, local_token_mean, constant_normaliser, global_token_mean, sequence_sum
06 grpo variants: Dr. GRPO's constant normaliser -> course_lib/ops/masking.py: masked_normalize
06 grpo variants: multi-reward normalisation (GDPO) -> course_lib/algos/grpo.py: multi_objective_advantages
06b trl family: CISPO, SAPO, VESPO weights -> course_lib/algos/grpo_losses.py: cispo_surrogate, sapo_surrogate, vespo_weights
06b trl family: high-entropy tokens, entropy bonus -> course_lib/ops/entropy.py: high_entropy_mask, entropy_bonus, AdaptiveEntropyCoef
06b trl family: sampler-mismatch correction (TIS / MIS), off-policy masking -> course_lib/ops/importance.py: sampling_correction, truncated_is_ratio, off_policy_sequence_mask
07 batch schedule: generation batch, unique prompts, optimizer steps -> course_lib/schedule.py: generation_batch_size, unique_prompts_per_generation, optimizer_steps_per_generation, schedule_table
08 rloo: leave-one-out baseline -> course_lib/algos/rloo.py: rloo_advantages, rloo_advantages_with_kl
08 rloo: sequence-level clipped loss -> course_lib/algos/rloo.py: rloo_policy_loss
09 rewards: weighted sum of reward functions, rubrics -> course_lib/rewards/combine.py: compute_rewards, rubric, predicate_reward
09 rewards: the "correct" rule shared by rewards and evaluation -> course_lib/rewards/answers.py: is_correct
09 rewards: answer equivalence (the course's rules, then math-verify) -> course_lib/rewards/equivalence.py: equivalent, make_math_verify_reward
09 rewards: LLM judge, rubric score and group ranking (RULER-style), Cohen's kappa -> course_lib/judge.py: make_rubric_judge_reward, make_group_judge_reward, parse_group_ranking, cohen_kappa
09 rewards: the pre-flight probe of degenerate completions -> course_lib/rewards/probe.py: probe_rewards, degenerate_completions
10 inference memory: log-probs without (B, T, V) logits -> course_lib/ops/logprobs.py: selective_log_softmax, fused_linear_logprobs
10 inference memory: the completion forward with a shared prompt -> course_lib/policy.py: completion_forward
11 capstone: accuracy with a Wilson interval, lift between two runs -> course_lib/evaluation.py: wilson_interval, lift_interval
11 capstone: pass@k and maj@k -> course_lib/sampled_evaluation.py: pass_at_k, maj_at_k
12 agents: multi-turn rollout loop, tool mask (tool results attended, not trained) -> course_lib/rollout/agents.py: run_agent_rollouts, Trajectory, tool_metrics
12 agents: environments (reset, public methods as tools, get_reward) -> course_lib/rollout/tools.py: Environments, ToolBox, public_methods
12 agents: supervised warm-up on scripted tool traces -> course_lib/rollout/warmup.py: ScriptedPolicy, supervised_warmup
13 debugging: the run doctor's rules and diagnosis -> course_lib/doctor/core.py: rule, diagnose
13 debugging: the failure museum -> course_lib/museum.py: run_exhibit
13 debugging: DAPO's dynamic sampling (drop groups whose rewards are all equal) -> course_lib/run/dynamic_sampling.py: draw_batch
13 debugging: DAPO's soft overlong punishment -> course_lib/rewards/overlong.py: soft_overlong_punishment
14 post training: SFT's completion-only loss, tokenising with a response mask, packing without cross-example attention -> course_lib/algos/sft.py: sft_loss, tokenize_prompt_and_output, pack_examples
14 post training: the block-diagonal causal mask of packed examples -> course_lib/ops/masking.py: packed_attention_mask
14 post training: SFT's packing in the training loop -> course_lib/post_training/packing.py: pack_micro_batches
14 post training: multi-turn SFT's assistant-only mask from rendered prefixes -> course_lib/post_training/conversations.py: assistant_spans, tokenize_conversation
14 post training: SFT's mean_token_accuracy without the logits -> course_lib/ops/top1.py: head_top1, mean_token_accuracy
14 post training: rejection sampling (expert iteration) -> course_lib/algos/rejection.py: rejection_filter
14 post training: DPO's loss (sigmoid, hinge, ipo), its f-divergences and implicit rewards -> course_lib/algos/dpo.py: dpo_loss, f_divergence_scores
14 post training: on-policy distillation's generalized JSD and per-token reverse KL -> course_lib/algos/distill.py: generalized_jsd, reverse_kl_token_advantages
14 post training: DPO pairs from the policy's own samples -> course_lib/post_training/data.py: preference_pairs, demonstrations

Floors: a folder (or top-level module) imports only from floors below its own, so a lesson's
file never reaches up into the machinery that runs it. ``tests/lib/test_import_layers.py``
holds every import, function-level ones included, to this table, and every folder to a line
of it; ``benchmarks/import_map.py`` prints the map.

floor 0: common, machine, progress, schedule, sandbox, feedback, grading, colab
floor 1: models, rewards, lesson_answers
floor 2: ops, data, reward_model, sampled_evaluation
floor 3: config, policy
floor 4: rollout
floor 5: presets, evaluation, post_training, judge
floor 6: algos, tiny, tool_evaluation
floor 7: run, toy
floor 8: doctor, widgets, group_batches
floor 9: trainer
floor 10: cli, museum, demo, checks, reward_hack
floor 11: __main__
"""
