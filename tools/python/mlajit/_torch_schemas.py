"""The schemas of torch.ops.mlajit.*: one list for both backends. The Python backend defines them from here;
the C++ backend (tools/python/csrc/mlajit_torch.cpp) spells the same strings, and the tests check that the
loaded ops' schemas equal these, whichever backend registered them."""
NAMESPACE = "mlajit"

SCHEMAS = {
    "mla_prefill":
        "mla_prefill(Tensor q_nope, Tensor q_pe, Tensor? kv_c, Tensor? k_pe, Tensor w_kv_b, Tensor indices, "
        "Tensor cu_seqlens_q, Tensor cu_seqlens_k, SymInt[] cu_seqlens_q_host, SymInt[] cu_seqlens_k_host, "
        "float sm_scale, int topk=0, int force_path=-1, Tensor? kv_cache=None, Tensor? block_table=None) -> Tensor",
    "sparse_mqa_prefill":
        "sparse_mqa_prefill(Tensor q, Tensor kv, Tensor indices, float sm_scale, Tensor? cu_seqlens_q=None, "
        "Tensor? cu_seqlens_kv=None, SymInt[]? cu_seqlens_q_host=None, SymInt[]? cu_seqlens_kv_host=None, "
        "Tensor? block_table=None, int causal=0) -> (Tensor, Tensor)",
    "mha_prefill":
        "mha_prefill(Tensor q, Tensor k_nope, Tensor? k_pe, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
        "SymInt[] cu_seqlens_q_host, SymInt[] cu_seqlens_k_host, float sm_scale, Tensor? mask=None) "
        "-> (Tensor, Tensor)",
    "topk_mask_build":
        "topk_mask_build(Tensor indices, Tensor cu_seqlens_q, Tensor cu_seqlens_k, SymInt[] cu_seqlens_q_host, "
        "SymInt[] cu_seqlens_k_host) -> Tensor",
    "quantize_latent_cache":
        "quantize_latent_cache(Tensor kv_c, Tensor k_pe, Tensor slot_mapping, Tensor(a!) kv_cache) -> ()",
}
