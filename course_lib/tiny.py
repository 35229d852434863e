"""The embedded ``tiny`` policy: a ~1M-parameter Llama that the project builds itself.

Why it exists: RL needs a policy that is *partly* competent (a model that never samples a
right answer gets no learning signal), and the course must run offline on a laptop CPU.
So we build a character-level tokenizer with a ChatML template, a small
``LlamaForCausalLM``, and supervise it briefly on the arithmetic task (loss on the answer
tokens only), stopping well short of mastery so that RL has room to improve it.

``python -m course_lib build-tiny`` rebuilds it bit-for-bit on CPU (fixed seeds, one
thread, deterministic data order) into ``course_lib/assets/tiny``.

Simplifications: characters instead of BPE merges; no pre-training on general text.
"""

from __future__ import annotations

import json
import math
import string
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .models import TINY_DIR

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|pad|>", "<unk>", "<|im_start|>", "<|im_end|>")


def build_char_tokenizer():
    """A character-level fast tokenizer (printable ASCII + newline) with ChatML tokens.

    Returns a ``transformers.PreTrainedTokenizerFast`` whose ``eos_token`` is ``<|im_end|>``
    (the end of an assistant turn) and whose pad token is ``<|pad|>`` (id 0).
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    characters = list(string.printable[:95]) + ["\n"]  # digits, letters, punctuation, space
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for ch in characters:
        vocab.setdefault(ch, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<|pad|>", unk_token="<unk>", eos_token="<|im_end|>",
        bos_token=None, additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer


@dataclass(frozen=True)
class TinyRecipe:
    """Everything that determines the tiny model; stored next to the weights."""

    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 384
    max_positions: int = 128
    steps: int = 500
    batch_size: int = 32
    learning_rate: float = 2e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    train_rows: int = 6000
    seed: int = 0
    task: str = "arithmetic"


def build_tiny_model(tokenizer, recipe: TinyRecipe):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=recipe.hidden_size, intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_layers, num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_heads, max_position_embeddings=recipe.max_positions,
        tie_word_embeddings=False, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None, rms_norm_eps=1e-5, torch_dtype="float32",
    )
    torch.manual_seed(recipe.seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def _sft_batches(tokenizer, prompts, answers):
    """Tokenize prompt + answer + eos; labels are -100 except on the answer and eos."""
    examples = []
    for messages, answer in zip(prompts, answers):
        prompt_text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        examples.append((list(prompt_ids), answer_ids))
    return examples


def _collate(examples, pad_id):
    length = max(len(p) + len(a) for p, a in examples)
    input_ids = torch.full((len(examples), length), pad_id)
    labels = torch.full((len(examples), length), -100)
    attention = torch.zeros((len(examples), length), dtype=torch.long)
    for row, (p, a) in enumerate(examples):
        ids = p + a
        start = length - len(ids)  # left padding, as at generation time
        input_ids[row, start:] = torch.tensor(ids)
        attention[row, start:] = 1
        labels[row, start + len(p):] = torch.tensor(a)
    return input_ids, attention, labels


def train_tiny(output_dir: str | Path = TINY_DIR, recipe: TinyRecipe = TinyRecipe(), progress: bool = True,
               eval_rows: int = 200) -> dict:
    """Build the tokenizer and model, supervise it on the task, save both, return a report.

    The report (also saved as ``recipe.json``) has the parameter count, the held-out greedy
    accuracy on ``eval_rows`` test problems, and the build time.
    """
    from tqdm.auto import tqdm

    from .data import get_task
    from .evaluation import evaluate_accuracy

    start = time.time()
    torch.manual_seed(recipe.seed)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, recipe)
    train = get_task(recipe.task, split="train", n=recipe.train_rows, seed=recipe.seed)
    examples = _sft_batches(tokenizer, train["prompt"], train["answer"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, weight_decay=recipe.weight_decay)

    def lr_at(step: int) -> float:  # linear warm-up, cosine decay to 10%
        if step < recipe.warmup_steps:
            return (step + 1) / recipe.warmup_steps
        progress_frac = (step - recipe.warmup_steps) / max(1, recipe.steps - recipe.warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress_frac))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    generator = torch.Generator().manual_seed(recipe.seed)
    model.train()
    bar = tqdm(range(recipe.steps), desc="build-tiny (SFT)", disable=not progress)
    for step in bar:
        index = torch.randint(len(examples), (recipe.batch_size,), generator=generator)
        input_ids, attention, labels = _collate([examples[i] for i in index], tokenizer.pad_token_id)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 50 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()
    test = get_task(recipe.task, split="test", n=eval_rows, seed=1)
    accuracy = evaluate_accuracy(model, tokenizer, test, max_new_tokens=8)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir, safe_serialization=True)
    tokenizer.save_pretrained(output_dir)
    report = {
        "recipe": asdict(recipe),
        "parameters": sum(p.numel() for p in model.parameters()),
        "greedy_accuracy_test": accuracy,
        "eval_rows": eval_rows,
        "build_seconds": round(time.time() - start, 1),
        "torch_version": torch.__version__,
    }
    (output_dir / "recipe.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
