"""Dequantize a GGUF once into an fp32 safetensors directory (weights, tokenizer, generation config).

transformers has no GGUF matmul kernel on CPU here, so a GGUF always loads as dense fp32 and takes 15-75 s; the
safetensors copy reloads in seconds (MEASURED.md).
"""

from __future__ import annotations

import gc
import os
import shutil
from pathlib import Path

import torch

from engine.models.cache import is_complete, mark_complete
from engine.models.gguf import verify_gguf
from engine.models.progress import step


def convert_gguf(gguf_file: Path, out_dir: Path, progress: bool = True) -> Path:
    """Write ``out_dir`` from ``gguf_file`` unless a complete conversion is already there; return ``out_dir``.

    The conversion is written to a sibling ``.partial`` directory, marked complete, then renamed into place, so an
    interrupted run leaves nothing that looks finished and is simply redone.
    """
    if is_complete(out_dir):
        return out_dir
    verify_gguf(gguf_file)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    partial = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    source = dict(pretrained_model_name_or_path=str(gguf_file.parent), gguf_file=gguf_file.name)
    with step(f"converting {gguf_file.name} to fp32 safetensors in {out_dir}", progress):
        tokenizer = AutoTokenizer.from_pretrained(**source)
        model = AutoModelForCausalLM.from_pretrained(**source, dtype=torch.float32)
        # The weights are already dense, but save_pretrained refuses anything loaded through the GGUF quantizer.
        model.hf_quantizer = None
        del model.config.quantization_config
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        facts = {"source_gguf": str(gguf_file.resolve()), "source_bytes": gguf_file.stat().st_size,
                 "parameters": sum(p.numel() for p in model.parameters()), "dtype": "float32"}
        del model
        gc.collect()
        mark_complete(partial, facts)
        os.replace(partial, out_dir)
    return out_dir
