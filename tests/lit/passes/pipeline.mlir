// RUN: llmc-opt %s --llm-pipeline | FileCheck %s
// RUN: llmc-opt %s --llm-pipeline='kv-block-size=32 disable=fuse-qkv,plan-memory' | FileCheck %s --check-prefix=PARTIAL
// RUN: llmc-opt %s --llm-pipeline='kv-dtype=bf16' | FileCheck %s --check-prefix=BF16
// RUN: not llmc-opt %s --llm-pipeline='kv-dtype=e5m2' 2>&1 | FileCheck %s --check-prefix=E5M2

// The whole pipeline on one Llama layer.
// CHECK: module attributes {llm.kv_spec = {block_size = 16 : i64, head_dim = 16 : i64, kv_dtype = "f32", layout = "block_head_slot_dim", num_kv_heads = 2 : i64, num_layers = 1 : i64}, llm.weight_layout = "cpu_interleaved8"}
// CHECK: func.func @forward{{.*}} attributes {llm.arena_bytes_per_token = {{[0-9]+}} : i64}
// CHECK: llm.linear {{.*}} -> tensor<?x128xf32>
// CHECK-NEXT: llm.rope_kv_store {{.*}}block_size = 16{{.*}}llm.arena_offsets
// CHECK: llm.add_rms_norm
// CHECK: llm.silu_mul %{{.*}} {llm.arena_offsets = [{{[0-9]+}}]} : (tensor<?x256xf32>) -> tensor<?x128xf32>
// CHECK: llm.add_rms_norm
// CHECK: llm.logits {{.*}}llm.arena_offsets

// PARTIAL: llm.kv_spec = {block_size = 32 : i64
// PARTIAL-NOT: llm.split
// PARTIAL-NOT: llm.rope_kv_store
// PARTIAL: llm.kv_store {{.*}}block_size = 32
// PARTIAL-NOT: llm.arena
// PARTIAL: llm.silu_mul %{{.*}} : (tensor<?x256xf32>) -> tensor<?x128xf32>

// BF16: llm.kv_spec = {block_size = 16 : i64, head_dim = 16 : i64, kv_dtype = "bf16"
// BF16: llm.rope_kv_store {{.*}}kv_dtype = "bf16"
// E5M2: error: kv dtype e5m2 not supported (supported: f32, bf16, f16, fp8, int8)
func.func @forward(%tokens: tensor<?xi32>, %positions: tensor<?xi32>,
    %batch: !llm.batch, %kv: !llm.kv_cache) -> tensor<?x256xf32> {
  %emb = llm.weight "model.embed_tokens.weight" : tensor<256x64xf32>
  %x0 = llm.embedding %tokens, %emb : (tensor<?xi32>, tensor<256x64xf32>) -> tensor<?x64xf32>
  %ln0 = llm.weight "model.layers.0.input_layernorm.weight" : tensor<64xf32>
  %h0 = llm.rms_norm %x0, %ln0 {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %wq0 = llm.weight "model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
  %q0 = llm.linear %h0, %wq0 : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %wk0 = llm.weight "model.layers.0.self_attn.k_proj.weight" : tensor<32x64xf32>
  %k0 = llm.linear %h0, %wk0 : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %wv0 = llm.weight "model.layers.0.self_attn.v_proj.weight" : tensor<32x64xf32>
  %v0 = llm.linear %h0, %wv0 : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %qr0 = llm.rope %q0, %positions {num_heads = 4 : i64, head_dim = 16 : i64, theta = 10000.0 : f64} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %kr0 = llm.rope %k0, %positions {num_heads = 2 : i64, head_dim = 16 : i64, theta = 10000.0 : f64} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %kv1 = llm.kv_store %kr0, %v0, %kv, %batch {layer = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : tensor<?x32xf32>, tensor<?x32xf32>
  %attn0 = llm.paged_attention %qr0, %kv1, %batch {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 0.25 : f64} : tensor<?x64xf32> -> tensor<?x64xf32>
  %wo0 = llm.weight "model.layers.0.self_attn.o_proj.weight" : tensor<64x64xf32>
  %o0 = llm.linear %attn0, %wo0 : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %r0 = llm.add %x0, %o0 : tensor<?x64xf32>
  %pln0 = llm.weight "model.layers.0.post_attention_layernorm.weight" : tensor<64xf32>
  %h2_0 = llm.rms_norm %r0, %pln0 {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %wgate0 = llm.weight "model.layers.0.mlp.gate_proj.weight" : tensor<128x64xf32>
  %gate0 = llm.linear %h2_0, %wgate0 : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %wup0 = llm.weight "model.layers.0.mlp.up_proj.weight" : tensor<128x64xf32>
  %up0 = llm.linear %h2_0, %wup0 : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %act0 = llm.silu_mul %gate0, %up0 : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
  %wdown0 = llm.weight "model.layers.0.mlp.down_proj.weight" : tensor<64x128xf32>
  %down0 = llm.linear %act0, %wdown0 : (tensor<?x128xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>
  %x1 = llm.add %r0, %down0 : tensor<?x64xf32>
  %norm = llm.weight "model.norm.weight" : tensor<64xf32>
  %final = llm.rms_norm %x1, %norm {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %lm = llm.weight "lm_head.weight" : tensor<256x64xf32>
  %logits = llm.logits %final, %lm, %batch : (tensor<?x64xf32>, tensor<256x64xf32>, !llm.batch) -> tensor<?x256xf32>
  return %logits : tensor<?x256xf32>
}
