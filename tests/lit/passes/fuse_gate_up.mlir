// RUN: llmc-opt %s -split-input-file --llm-fuse-gate-up | FileCheck %s

// One Llama layer: gate/up become one linear over [gate; up] feeding the
// one-operand silu_mul; q/k/v (no silu_mul) are untouched.
// CHECK-LABEL: func.func @forward
// CHECK-COUNT-3: llm.linear %{{.*}} : (tensor<?x64xf32>, tensor<{{64|32}}x64xf32>)
// CHECK:      %[[H2:.*]] = llm.rms_norm
// CHECK-NEXT: %[[WG:.*]] = llm.weight "model.layers.0.mlp.gate_proj.weight" : tensor<128x64xf32>
// CHECK-NEXT: %[[WU:.*]] = llm.weight "model.layers.0.mlp.up_proj.weight" : tensor<128x64xf32>
// CHECK-NEXT: %[[W:.*]] = llm.weight_concat %[[WG]], %[[WU]] : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<256x64xf32>
// CHECK-NEXT: %[[GU:.*]] = llm.linear %[[H2]], %[[W]] : (tensor<?x64xf32>, tensor<256x64xf32>) -> tensor<?x256xf32>
// CHECK-NEXT: %[[A:.*]] = llm.silu_mul %[[GU]] : (tensor<?x256xf32>) -> tensor<?x128xf32>
// CHECK-NEXT: llm.weight "model.layers.0.mlp.down_proj.weight"
// CHECK-NEXT: llm.linear %[[A]], %{{.*}} : (tensor<?x128xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>
// CHECK-NOT:  llm.silu_mul
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

// -----

// The gate projection has a second user: nothing is fused.
// CHECK-LABEL: func.func @gate_used_twice
// CHECK-NOT: llm.weight_concat
// CHECK: llm.silu_mul %{{.*}}, %{{.*}} : (tensor<?x128xf32>, tensor<?x128xf32>)
func.func @gate_used_twice(%x: tensor<?x64xf32>) -> (tensor<?x128xf32>, tensor<?x128xf32>) {
  %wg = llm.weight "g" : tensor<128x64xf32>
  %wu = llm.weight "u" : tensor<128x64xf32>
  %g = llm.linear %x, %wg : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %u = llm.linear %x, %wu : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %a = llm.silu_mul %g, %u : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
  return %a, %g : tensor<?x128xf32>, tensor<?x128xf32>
}

// -----

// Different inputs: nothing is fused.
// CHECK-LABEL: func.func @different_inputs
// CHECK-NOT: llm.weight_concat
// CHECK: llm.silu_mul %{{.*}}, %{{.*}} : (tensor<?x128xf32>, tensor<?x128xf32>)
func.func @different_inputs(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>) -> tensor<?x128xf32> {
  %wg = llm.weight "g" : tensor<128x64xf32>
  %wu = llm.weight "u" : tensor<128x64xf32>
  %g = llm.linear %x, %wg : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %u = llm.linear %y, %wu : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %a = llm.silu_mul %g, %u : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
  return %a : tensor<?x128xf32>
}

// -----

// A bias on either projection: nothing is fused.
// CHECK-LABEL: func.func @with_bias
// CHECK-NOT: llm.weight_concat
// CHECK: llm.silu_mul %{{.*}}, %{{.*}} : (tensor<?x128xf32>, tensor<?x128xf32>)
func.func @with_bias(%x: tensor<?x64xf32>) -> tensor<?x128xf32> {
  %wg = llm.weight "g" : tensor<128x64xf32>
  %bg = llm.weight "gb" : tensor<128xf32>
  %wu = llm.weight "u" : tensor<128x64xf32>
  %g = llm.linear %x, %wg, %bg : (tensor<?x64xf32>, tensor<128x64xf32>, tensor<128xf32>) -> tensor<?x128xf32>
  %u = llm.linear %x, %wu : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %a = llm.silu_mul %g, %u : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
  return %a : tensor<?x128xf32>
}

// -----

// Operands that are not linears (and an already fused silu_mul): unchanged.
// CHECK-LABEL: func.func @not_linears
// CHECK-NOT: llm.weight_concat
// CHECK: llm.silu_mul %{{.*}}, %{{.*}} : (tensor<?x128xf32>, tensor<?x128xf32>)
// CHECK: llm.silu_mul %{{.*}} : (tensor<?x256xf32>) -> tensor<?x128xf32>
func.func @not_linears(%g: tensor<?x128xf32>, %u: tensor<?x128xf32>, %gu: tensor<?x256xf32>)
    -> (tensor<?x128xf32>, tensor<?x128xf32>) {
  %a = llm.silu_mul %g, %u : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
  %b = llm.silu_mul %gu : (tensor<?x256xf32>) -> tensor<?x128xf32>
  return %a, %b : tensor<?x128xf32>, tensor<?x128xf32>
}
