"""Tiny randomly initialised Hugging Face models with locally built tokenizers, saved to folders:
every strategy can be exercised without downloading anything."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CORPUS = [
    "win cash now call this number", "free entry txt win to claim your prize", "urgent you have won",
    "see you at noon", "call me when you are free", "running late sorry", "ok on my way home",
    "You classify a text into one of these classes", "Task: Given a text, return only the name of the class.",
    "Text: Answer: ham spam joy sadness anger fear love surprise positive negative neutral A B C D E F",
    "user assistant system", "the letter of the class", "hello world this is a test",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _bpe(special: list[str], vocab_size: int = 400) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 3, trainer)
    return tok


def make_tiny_encoder(folder: Path) -> Path:
    tok = _bpe(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=512)
    cfg = BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=512, pad_token_id=0)
    with torch.random.fork_rng():   # the same weights whatever ran before: results may not hang on test order
        torch.manual_seed(0)
        BertModel(cfg).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def make_tiny_wordpiece_encoder(folder: Path) -> Path:
    """make_tiny_encoder with a WordPiece vocabulary of the corpus' words (as MiniLM's, in miniature): what it
    lacks, emoji above all, becomes [UNK], where the byte-level BPE reads anything."""
    words = sorted({w for line in CORPUS for w in line.lower().replace(".", " ").replace(":", " ").split()})
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, ".", ":"])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=512)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=512, pad_token_id=0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        BertModel(cfg).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def make_tiny_causal(folder: Path, chat: bool = True) -> Path:
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = _bpe(specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token="<|endoftext|>", model_max_length=512)
    if chat:
        fast.chat_template = CHAT_TEMPLATE
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      tie_word_embeddings=True, pad_token_id=tok.token_to_id("<|endoftext|>"),
                      bos_token_id=tok.token_to_id("<|im_start|>"), eos_token_id=tok.token_to_id("<|im_end|>"))
    with torch.random.fork_rng():
        torch.manual_seed(0)
        LlamaForCausalLM(cfg).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder
