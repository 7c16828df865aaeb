"""A tiny randomly initialised Llama-family model and a tokenizer trained here, offline
(``train --smoke`` and both test tiers; nothing is downloaded).

The tokenizer splits text like Qwen2's, so punctuation runs take the newlines after them:
``>\\n\\n`` is one token and a stop string ``</search>`` is completed by a token that carries
``\\n\\n`` past it, the case where vLLM's cut ``text`` and its ``token_ids`` disagree, which the
executor must handle. The chat template is Qwen's ``<|im_start|>role\\n...<|im_end|>`` layout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from parallelsearch.agents.protocol.templates import TOOLS_CHAT_TEMPLATE

#: Qwen2's pre-tokenizer split pattern (a fact of its tokenizer.json, written out here)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QUESTION = "Were Scott Derrickson and Ed Wood of the same nationality?"


def _corpus() -> list[str]:
    from parallelsearch.agents.protocol import INVALID_FEEDBACK, TEMPLATES

    episode = (
        "<think> two people, search both </think>\n<search> Scott Derrickson ## Ed Wood </search>\n\n"
        '<information>Doc 1(Title: "Scott Derrickson") Scott Derrickson is an American director.\n'
        "Doc 1(Title: Ed Wood) Edward Davis Wood Jr. was an American filmmaker.</information>\n\n"
        "<think> both are American </think>\n<answer> yes </answer>"
    )
    # the templates it was first trained on, so a template added later does not move its vocabulary
    texts = [TEMPLATES[name].replace("{question}", QUESTION) for name in ("paper", "official", "search_r1")]
    texts += [episode, INVALID_FEEDBACK, "<search> a </search>.\n", "</answer>\n\n", "##"]
    return texts * 40


#: the tool-call markers Qwen2.5's tokenizer holds as single added tokens (not special: a decode
#: that skips special tokens keeps them)
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


def _tools_corpus() -> list[str]:
    """What a tools-format tokenizer is also trained on: the chat agent's instructions, the tool's
    signature and an episode of calls and results, as :data:`TOOLS_CHAT_TEMPLATE` lays them out."""
    import json

    from parallelsearch.agents.protocol.templates import SEARCH_TOOL, TOOLS_TEMPLATE

    calls = "\n".join(
        '<tool_call>\n{"name": "search", "arguments": ' + json.dumps({"query": q}) + "}\n</tool_call>"
        for q in ("Scott Derrickson", "Ed Wood")
    )
    episode = (
        f"{calls}<|im_end|>\n<|im_start|>user\n<tool_response>\n"
        'Doc 1(Title: "Scott Derrickson") Scott Derrickson is an American director.\n'
        "</tool_response><|im_end|>\n<|im_start|>assistant\nyes<|im_end|>"
    )
    return [TOOLS_TEMPLATE.replace("{question}", QUESTION), json.dumps(SEARCH_TOOL), episode]


def build_tokenizer(vocab_size: int = 800, *, tools: bool = False) -> Any:
    """A byte-level BPE tokenizer with Qwen2's split pattern and chat template. ``tools=True``: a
    tokenizer for the tools format, as a chat model's is: also trained on tool-call text, with
    :data:`TOOL_TOKENS` as single tokens and :data:`TOOLS_CHAT_TEMPLATE` (a call is then about as
    many tokens as a tag search, where the tags-only tokenizer spends four times as many)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        _corpus() + (_tools_corpus() * 40 if tools else []),
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=SPECIAL,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        additional_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    if tools:
        hf.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
        hf.chat_template = TOOLS_CHAT_TEMPLATE
    return hf


def build_model(tokenizer: Any, *, hidden: int = 64, layers: int = 2, heads: int = 2, seed: int = 0) -> Any:
    """A random Llama with head_dim = hidden / heads (>= 32, which vLLM's CPU kernels need)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=hidden // heads,
        max_position_embeddings=16384,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg).eval()


def save_tiny(folder: str | Path, *, tools: bool = False, **model_kwargs: Any) -> Path:
    """Build both and save them as one model folder (what ``vllm serve PATH`` loads); ``tools``:
    the tools-format tokenizer (:func:`build_tokenizer`)."""
    folder = Path(folder)
    tok = build_tokenizer(tools=tools)
    model = build_model(tok, **model_kwargs)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    return folder
