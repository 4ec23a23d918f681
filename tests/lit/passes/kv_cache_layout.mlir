// RUN: llmc-opt %s -split-input-file --llm-kv-cache-layout | FileCheck %s
// RUN: llmc-opt %s -split-input-file --llm-kv-cache-layout='block-size=32' | FileCheck %s --check-prefix=B32
// RUN: llmc-opt %s -split-input-file --llm-kv-cache-layout='kv-dtype=f16' | FileCheck %s --check-prefix=F16
// RUN: llmc-opt %s -split-input-file --llm-kv-cache-layout='kv-dtype=fp8' | FileCheck %s --check-prefix=FP8
// RUN: not llmc-opt %s -split-input-file --llm-kv-cache-layout='kv-dtype=int4' 2>&1 | FileCheck %s --check-prefix=INT4
// RUN: not llmc-opt %s -split-input-file --llm-kv-cache-layout='block-size=0' 2>&1 | FileCheck %s --check-prefix=B0

// F16: module attributes {llm.kv_spec = {block_size = 16 : i64, head_dim = 16 : i64, kv_dtype = "f16"
// F16-COUNT-4: kv_dtype = "f16", layer
// FP8: module attributes {llm.kv_spec = {block_size = 16 : i64, head_dim = 16 : i64, kv_dtype = "fp8"
// FP8-COUNT-4: kv_dtype = "fp8", layer
// INT4: error: kv dtype int4 not supported (supported: f32, bf16, f16, fp8, int8)
// B0: error: kv block size must be positive, got 0

// Two Llama layers: every cache op gets the layout, the module the spec.
// CHECK: module attributes {llm.kv_spec = {block_size = 16 : i64, head_dim = 16 : i64, kv_dtype = "f32", layout = "block_head_slot_dim", num_kv_heads = 2 : i64, num_layers = 2 : i64}}
// CHECK-LABEL: func.func @forward
// CHECK: llm.kv_store {{.*}} {block_size = 16 : i64, head_dim = 16 : i64, kv_dtype = "f32", layer = 0 : i64, layout = "block_head_slot_dim", num_kv_heads = 2 : i64}
// CHECK: llm.paged_attention {{.*}} {block_size = 16 : i64, head_dim = 16 : i64, kv_dtype = "f32", layer = 0 : i64, layout = "block_head_slot_dim", num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 2.500000e-01 : f64}
// CHECK: llm.kv_store {{.*}} {block_size = 16 : i64, head_dim = 16 : i64, kv_dtype = "f32", layer = 1 : i64, layout = "block_head_slot_dim", num_kv_heads = 2 : i64}
// CHECK: llm.paged_attention {{.*}} {block_size = 16 : i64, head_dim = 16 : i64, kv_dtype = "f32", layer = 1 : i64, layout = "block_head_slot_dim", num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 2.500000e-01 : f64}
// B32: module attributes {llm.kv_spec = {block_size = 32 : i64, head_dim = 16 : i64, kv_dtype = "f32", layout = "block_head_slot_dim", num_kv_heads = 2 : i64, num_layers = 2 : i64}}
// B32-COUNT-4: block_size = 32 : i64, head_dim = 16 : i64, kv_dtype = "f32"
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
  %ln1 = llm.weight "model.layers.1.input_layernorm.weight" : tensor<64xf32>
  %h1 = llm.rms_norm %x1, %ln1 {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %wq1 = llm.weight "model.layers.1.self_attn.q_proj.weight" : tensor<64x64xf32>
  %q1 = llm.linear %h1, %wq1 : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %wk1 = llm.weight "model.layers.1.self_attn.k_proj.weight" : tensor<32x64xf32>
  %k1 = llm.linear %h1, %wk1 : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %wv1 = llm.weight "model.layers.1.self_attn.v_proj.weight" : tensor<32x64xf32>
  %v1 = llm.linear %h1, %wv1 : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %qr1 = llm.rope %q1, %positions {num_heads = 4 : i64, head_dim = 16 : i64, theta = 10000.0 : f64} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %kr1 = llm.rope %k1, %positions {num_heads = 2 : i64, head_dim = 16 : i64, theta = 10000.0 : f64} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %kv2 = llm.kv_store %kr1, %v1, %kv1, %batch {layer = 1 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : tensor<?x32xf32>, tensor<?x32xf32>
  %attn1 = llm.paged_attention %qr1, %kv2, %batch {layer = 1 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 0.25 : f64} : tensor<?x64xf32> -> tensor<?x64xf32>
  %wo1 = llm.weight "model.layers.1.self_attn.o_proj.weight" : tensor<64x64xf32>
  %o1 = llm.linear %attn1, %wo1 : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %r1 = llm.add %x1, %o1 : tensor<?x64xf32>
  %pln1 = llm.weight "model.layers.1.post_attention_layernorm.weight" : tensor<64xf32>
  %h2_1 = llm.rms_norm %r1, %pln1 {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %wgate1 = llm.weight "model.layers.1.mlp.gate_proj.weight" : tensor<128x64xf32>
  %gate1 = llm.linear %h2_1, %wgate1 : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %wup1 = llm.weight "model.layers.1.mlp.up_proj.weight" : tensor<128x64xf32>
  %up1 = llm.linear %h2_1, %wup1 : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %act1 = llm.silu_mul %gate1, %up1 : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
  %wdown1 = llm.weight "model.layers.1.mlp.down_proj.weight" : tensor<64x128xf32>
  %down1 = llm.linear %act1, %wdown1 : (tensor<?x128xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>
  %x2 = llm.add %r1, %down1 : tensor<?x64xf32>
  %norm = llm.weight "model.norm.weight" : tensor<64xf32>
  %final = llm.rms_norm %x2, %norm {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %lm = llm.weight "lm_head.weight" : tensor<256x64xf32>
  %logits = llm.logits %final, %lm, %batch : (tensor<?x64xf32>, tensor<256x64xf32>, !llm.batch) -> tensor<?x256xf32>
  return %logits : tensor<?x256xf32>
}

// -----

// No cache ops: the module is left alone (no kv_spec).
// CHECK-LABEL: module {
// CHECK-NOT: llm.kv_spec
// CHECK: func.func @no_cache
func.func @no_cache(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %w = llm.weight "w" : tensor<64xf32>
  %n = llm.rms_norm %x, %w {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  return %n : tensor<?x64xf32>
}
