"""wsync.engines.hf_shapes: the tensors' names and shapes an engine derives from its model's
configuration when the caller gives no hf_shapes, with the installed transformers (real classes
and real save_pretrained checkpoints; the engine adapters' own use is tested in test_vllm.py,
test_vllm_engine.py, test_verl.py and test_sglang.py)."""
from __future__ import annotations

import pytest
import torch
import transformers

from wsync.engines import hf_shapes


def llama_config(tied: bool) -> transformers.LlamaConfig:
    cfg = transformers.LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=48,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=64,
                                   tie_word_embeddings=tied)
    cfg.architectures = ["LlamaForCausalLM"]
    return cfg


@pytest.mark.parametrize("tied", [False, True])
def test_from_config_names_what_a_trainer_registers(tied):
    """The meta-device model's parameters are exactly the trainer's (a real transformers model of
    the same config: what Trainer.register_module(model) registers; a tied lm_head once)."""
    cfg = llama_config(tied)
    trainer_model = transformers.LlamaForCausalLM(cfg)
    want = {n: tuple(p.shape) for n, p in trainer_model.named_parameters()}
    got = hf_shapes.from_config(cfg)
    assert got == want
    assert ("lm_head.weight" in got) is not tied
    assert got["model.embed_tokens.weight"] == (97, 32)


def test_from_config_without_architectures_uses_the_model_type():
    cfg = llama_config(False)
    cfg.architectures = None
    assert hf_shapes.from_config(cfg) == hf_shapes.from_config(llama_config(False))


def test_from_checkpoint_reads_the_safetensors_headers(tmp_path):
    model = transformers.LlamaForCausalLM(llama_config(False)).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    assert hf_shapes.from_checkpoint(tmp_path) == {n: tuple(t.shape)
                                                   for n, t in model.state_dict().items()}


def test_resolve_prefers_the_given_shapes_then_config_then_checkpoint(tmp_path):
    cfg = llama_config(False)
    override = {"only.this": [3, 4]}
    assert hf_shapes.resolve(override, cfg) == {"only.this": (3, 4)}
    assert hf_shapes.resolve({}, cfg) == hf_shapes.from_config(cfg)
    # An architecture transformers has no class for (an EAGLE head, remote code): the
    # checkpoint in the model's directory tells.
    unknown = transformers.PretrainedConfig(architectures=["NoSuchHeadForCausalLM"])
    transformers.LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    assert hf_shapes.resolve(None, unknown, tmp_path) == hf_shapes.from_checkpoint(tmp_path)
    assert hf_shapes.from_model_path(tmp_path) == hf_shapes.from_config(cfg)


def test_resolve_names_the_missing_argument(tmp_path):
    unknown = transformers.PretrainedConfig(architectures=["NoSuchHeadForCausalLM"])
    with pytest.raises(hf_shapes.ShapesUnknownError, match="pass draft_hf_shapes"):
        hf_shapes.resolve(None, unknown, tmp_path, what="draft_hf_shapes")
    with pytest.raises(hf_shapes.ShapesUnknownError, match="no safetensors checkpoint"):
        hf_shapes.resolve(None, None, tmp_path)
    with pytest.raises(hf_shapes.ShapesUnknownError, match="pass hf_shapes"):
        hf_shapes.resolve(None)


class _ModelConfig:
    """The two fields of vLLM's ModelConfig that wsync.engines.vllm reads (hf_config, model: its
    path); vLLM itself is tested with its own ModelConfig in test_vllm.py / test_vllm_engine.py."""

    def __init__(self, hf_config, model: str = "") -> None:
        self.hf_config, self.model = hf_config, model


def test_vllm_draft_shapes_derived_skipped_or_refused(tmp_path):
    from wsync.engines.vllm import WsyncInitInfo, draft_shapes_for

    target = _ModelConfig(llama_config(False), str(tmp_path / "target"))
    draft_cfg = llama_config(True)
    draft = torch.nn.Linear(2, 2)  # a draft model is present (its parameters are not read here)
    derived = draft_shapes_for(WsyncInitInfo(), draft, target, _ModelConfig(draft_cfg))
    assert derived == hf_shapes.from_config(draft_cfg)
    assert draft_shapes_for(WsyncInitInfo(draft_hf_shapes={"x": [2]}), draft, target,
                            _ModelConfig(draft_cfg)) == {"x": (2,)}
    assert draft_shapes_for(WsyncInitInfo(sync_draft=False), draft, target,
                            _ModelConfig(draft_cfg)) == {}
    assert draft_shapes_for(WsyncInitInfo(), None, target, None) == {}
    # An MTP-style draft: an architecture transformers has no class for, in the target's own
    # directory (whose checkpoint names every target tensor: never read for the draft).
    transformers.LlamaForCausalLM(llama_config(False)).save_pretrained(tmp_path / "target")
    mtp = _ModelConfig(transformers.PretrainedConfig(architectures=["SomeMTPHead"]),
                       str(tmp_path / "target"))
    with pytest.warns(UserWarning, match="draft model is not updated"):
        assert draft_shapes_for(WsyncInitInfo(), draft, target, mtp) == {}
    with pytest.raises(hf_shapes.ShapesUnknownError, match="pass draft_hf_shapes"):
        draft_shapes_for(WsyncInitInfo(sync_draft=True), draft, target, mtp)
