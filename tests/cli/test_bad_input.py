"""Bad input gets a clear error naming the problem and a non-zero exit, never a crash."""

import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from conftest import TINY, clean_error, ok, run


def copy_model(tmp_path, name="llama"):
    dst = tmp_path / name
    shutil.copytree(TINY / name, dst)
    return dst


def test_truncated_safetensors(llmc, tmp_path):
    m = copy_model(tmp_path)
    st = m / "model.safetensors"
    data = st.read_bytes()
    st.write_bytes(data[: len(data) // 2])
    clean_error(run([llmc, "compile", m, "-o", tmp_path / "p.fb"]), "safetensors")


def test_safetensors_header_length_beyond_file(llmc, tmp_path):
    m = copy_model(tmp_path)
    st = m / "model.safetensors"
    data = bytearray(st.read_bytes())
    data[0:8] = struct.pack("<Q", 1 << 40)
    st.write_bytes(bytes(data))
    clean_error(run([llmc, "compile", m, "-o", tmp_path / "p.fb"]), "safetensors")


def test_safetensors_garbage_header(llmc, tmp_path):
    m = copy_model(tmp_path)
    st = m / "model.safetensors"
    data = bytearray(st.read_bytes())
    n = struct.unpack("<Q", data[:8])[0]
    data[8 : 8 + n] = b"{" * n
    st.write_bytes(bytes(data))
    clean_error(run([llmc, "compile", m, "-o", tmp_path / "p.fb"]), "safetensors")


@pytest.mark.parametrize("field", ["hidden_size", "num_hidden_layers", "vocab_size"])
def test_config_missing_field(llmc, tmp_path, field):
    m = copy_model(tmp_path)
    cfg = json.loads((m / "config.json").read_text())
    del cfg[field]
    (m / "config.json").write_text(json.dumps(cfg))
    clean_error(run([llmc, "compile", m, "-o", tmp_path / "p.fb"]), field)


def test_config_wrong_type(llmc, tmp_path):
    m = copy_model(tmp_path)
    cfg = json.loads((m / "config.json").read_text())
    cfg["num_attention_heads"] = "four"
    (m / "config.json").write_text(json.dumps(cfg))
    clean_error(run([llmc, "compile", m, "-o", tmp_path / "p.fb"]), "num_attention_heads")


def test_config_not_json(llmc, tmp_path):
    m = copy_model(tmp_path)
    (m / "config.json").write_text("{ not json")
    clean_error(run([llmc, "compile", m, "-o", tmp_path / "p.fb"]), "config.json")


def test_unsupported_architecture(llmc, tmp_path):
    m = copy_model(tmp_path)
    cfg = json.loads((m / "config.json").read_text())
    cfg["architectures"] = ["GPT2LMHeadModel"]
    (m / "config.json").write_text(json.dumps(cfg))
    clean_error(run([llmc, "compile", m, "-o", tmp_path / "p.fb"]), "GPT2LMHeadModel", "LlamaForCausalLM",
                "Qwen3ForCausalLM")


def test_missing_model_path(llmc, tmp_path):
    clean_error(run([llmc, "compile", tmp_path / "nope", "-o", tmp_path / "p.fb"]), "nope")


def gguf_path():
    p = os.environ.get("LLMC_SMOLLM2_GGUF")
    if not p or not Path(p).is_file():
        pytest.skip("LLMC_SMOLLM2_GGUF not set (tools/test.sh sets it)")
    return Path(p)


@pytest.mark.parametrize("cut", [16, 4096, 5_000_000])
def test_truncated_gguf(llmc, tmp_path, cut):
    bad = tmp_path / "cut.gguf"
    with open(gguf_path(), "rb") as f:
        bad.write_bytes(f.read(cut))
    clean_error(run([llmc, "compile", bad, "-o", tmp_path / "p.fb"]), "gguf")


def test_gguf_bad_magic_and_version(llmc, tmp_path):
    with open(gguf_path(), "rb") as f:
        head = bytearray(f.read(1 << 20))
    bad = tmp_path / "magic.gguf"
    bad.write_bytes(b"XXXX" + bytes(head[4:]))
    clean_error(run([llmc, "compile", bad, "-o", tmp_path / "p.fb"]), "gguf")
    head[4:8] = struct.pack("<I", 99)
    bad.write_bytes(bytes(head))
    clean_error(run([llmc, "compile", bad, "-o", tmp_path / "p.fb"]), "version")


def test_truncated_plan(llmrt, tiny_plan, tmp_path):
    data = tiny_plan.read_bytes()
    for cut in (10, 64, 1000, len(data) - 100):
        bad = tmp_path / f"cut{cut}.fb"
        bad.write_bytes(data[:cut])
        clean_error(run([llmrt, "run", bad, "--prompt-ids", "1,2"]), "plan")


def test_plan_bad_magic(llmrt, tiny_plan, tmp_path):
    data = bytearray(tiny_plan.read_bytes())
    data[0:8] = b"NOTAPLAN"
    bad = tmp_path / "magic.fb"
    bad.write_bytes(bytes(data))
    clean_error(run([llmrt, "run", bad, "--prompt-ids", "1,2"]), "magic")


def test_plan_corrupted_flatbuffer(llmrt, tiny_plan, tmp_path):
    data = bytearray(tiny_plan.read_bytes())
    fb_size = struct.unpack("<Q", data[24:32])[0]
    crashes = []
    for i, pos in enumerate(range(64, 64 + fb_size, max(1, fb_size // 40))):
        bad = bytearray(data)
        bad[pos] ^= 0xFF
        path = tmp_path / f"flip{i}.fb"
        path.write_bytes(bytes(bad))
        proc = run([llmrt, "run", path, "--prompt-ids", "1,2", "--max-tokens", "1"])
        if proc.returncode not in (0, 1):
            crashes.append((pos, proc.returncode, proc.stderr[-300:]))
    assert not crashes, crashes


def test_weight_hash_detects_corruption(llmrt, tiny_plan, tmp_path):
    data = bytearray(tiny_plan.read_bytes())
    data[-5] ^= 0x55
    bad = tmp_path / "weights.fb"
    bad.write_bytes(bytes(data))
    clean_error(run([llmrt, "run", bad, "--prompt-ids", "1,2", "--verify-weights"]), "hash")
    ok([llmrt, "run", tiny_plan, "--prompt-ids", "1,2", "--max-tokens", "1", "--verify-weights"])


def test_prompt_longer_than_context(llmc, llmrt, tmp_path):
    plan = tmp_path / "short.fb"
    ok([llmc, "compile", TINY / "llama", "-o", plan, "--target", "none", "-q", "--max-model-len", "16"])
    ids = ",".join(str(i % 50 + 1) for i in range(20))
    clean_error(run([llmrt, "run", plan, "--prompt-ids", ids]), "context")


def test_token_id_outside_vocab(llmrt, tiny_plan):
    clean_error(run([llmrt, "run", tiny_plan, "--prompt-ids", "1,999999"]), "vocab")


def test_bad_prompt_ids(llmrt, tiny_plan):
    clean_error(run([llmrt, "run", tiny_plan, "--prompt-ids", "1,x"]), "x")


def test_text_prompt_without_tokenizer(llmrt, tiny_plan):
    clean_error(run([llmrt, "run", tiny_plan, "--prompt", "hello"]), "tokenizer")


def corrupt_safetensors_tensor(path, name, first_bytes):
    """Overwrites the first bytes of tensor `name` in a safetensors file."""
    data = bytearray(path.read_bytes())
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    begin = header[name]["data_offsets"][0]
    data[8 + n + begin:8 + n + begin + len(first_bytes)] = first_bytes
    path.write_bytes(bytes(data))


def test_quantized_checkpoint_with_infinite_scale(llmc, tmp_path):
    src = Path(__file__).resolve().parents[1] / "fixtures" / "quant" / "gptq_4bit_sym"
    m = tmp_path / "gptq"
    shutil.copytree(src, m)
    name = "model.layers.0.self_attn.q_proj.scales"
    corrupt_safetensors_tensor(m / "model.safetensors", name, struct.pack("<H", 0x7C00))  # f16 +inf
    clean_error(run([llmc, "compile", m, "-o", tmp_path / "p.fb"]),
                "model.layers.0.self_attn.q_proj", "not finite")


def test_quantized_checkpoint_with_bad_group_size(llmc, tmp_path):
    src = Path(__file__).resolve().parents[1] / "fixtures" / "quant" / "gptq_4bit_sym"
    m = tmp_path / "gptq"
    shutil.copytree(src, m)
    cfg = json.loads((m / "config.json").read_text())
    cfg["quantization_config"]["group_size"] = 48
    (m / "config.json").write_text(json.dumps(cfg))
    clean_error(run([llmc, "compile", m, "-o", tmp_path / "p.fb"]), "group")
