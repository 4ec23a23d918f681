// RUN: llmc-opt %s -split-input-file --llm-fuse-add-rmsnorm | FileCheck %s

// Two Llama layers: every residual add that feeds the next plain RMSNorm
// (post-attention norm, next layer's input norm, final norm) is fused; later
// uses of the sum read the fused op's second result. The first layer's input
// norm reads the embedding (no add) and stays.
// CHECK-LABEL: func.func @forward
// CHECK:      %[[X0:.*]] = llm.embedding
// CHECK:      llm.rms_norm %[[X0]]
// CHECK:      llm.weight "model.layers.0.self_attn.o_proj.weight"
// CHECK-NEXT: %[[O0:.*]] = llm.linear
// CHECK-NEXT: %[[PLN0:.*]] = llm.weight "model.layers.0.post_attention_layernorm.weight"
// CHECK-NEXT: %[[N0:.*]], %[[R0:.*]] = llm.add_rms_norm %[[X0]], %[[O0]], %[[PLN0]] {eps = 1.000000e-05 : f64} : (tensor<?x64xf32>, tensor<?x64xf32>, tensor<64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>)
// CHECK-NEXT: llm.weight "model.layers.0.mlp.gate_proj.weight"
// CHECK-NEXT: llm.linear %[[N0]]
// CHECK:      llm.weight "model.layers.0.mlp.down_proj.weight"
// CHECK-NEXT: %[[D0:.*]] = llm.linear
// CHECK-NEXT: %[[LN1:.*]] = llm.weight "model.layers.1.input_layernorm.weight"
// CHECK-NEXT: %[[H1:.*]], %[[X1:.*]] = llm.add_rms_norm %[[R0]], %[[D0]], %[[LN1]]
// CHECK-NEXT: llm.weight "model.layers.1.self_attn.q_proj.weight"
// CHECK-NEXT: llm.linear %[[H1]]
// CHECK:      llm.weight "model.layers.1.self_attn.o_proj.weight"
// CHECK-NEXT: %[[O1:.*]] = llm.linear
// CHECK-NEXT: %[[PLN1:.*]] = llm.weight "model.layers.1.post_attention_layernorm.weight"
// CHECK-NEXT: %{{.*}}, %[[R1:.*]] = llm.add_rms_norm %[[X1]], %[[O1]], %[[PLN1]]
// CHECK:      llm.weight "model.layers.1.mlp.down_proj.weight"
// CHECK-NEXT: %[[D1:.*]] = llm.linear
// CHECK-NEXT: %[[NW:.*]] = llm.weight "model.norm.weight"
// CHECK-NEXT: %[[F:.*]], %{{.*}} = llm.add_rms_norm %[[R1]], %[[D1]], %[[NW]]
// CHECK-NEXT: llm.weight "lm_head.weight"
// CHECK-NEXT: llm.logits %[[F]]
// CHECK-NOT:  llm.add {{.*}}
// CHECK-NOT:  llm.rms_norm
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

// A per-head norm (weight of head_dim elements) is not a plain RMSNorm: no fusion.
// CHECK-LABEL: func.func @per_head_norm
// CHECK-NOT: llm.add_rms_norm
// CHECK: llm.add
// CHECK: llm.rms_norm
func.func @per_head_norm(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %s = llm.add %a, %b : tensor<?x64xf32>
  %w = llm.weight "head_norm" : tensor<16xf32>
  %n = llm.rms_norm %s, %w {eps = 1.0e-6 : f64} : (tensor<?x64xf32>, tensor<16xf32>) -> tensor<?x64xf32>
  return %n : tensor<?x64xf32>
}

// -----

// An add that feeds no norm, and a norm of something that is not an add: unchanged.
// CHECK-LABEL: func.func @no_pair
// CHECK-NOT: llm.add_rms_norm
// CHECK: llm.add
// CHECK: llm.rms_norm
func.func @no_pair(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  %s = llm.add %a, %b : tensor<?x64xf32>
  %w = llm.weight "norm" : tensor<64xf32>
  %n = llm.rms_norm %a, %w {eps = 1.0e-6 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  return %s, %n : tensor<?x64xf32>, tensor<?x64xf32>
}

// -----

// Two plain norms of one sum: the first is fused, the second reads the sum,
// as do the other users (including one between the add and the first norm).
// CHECK-LABEL: func.func @two_norms
// CHECK-NEXT: %[[W1:.*]] = llm.weight "n1"
// CHECK-NEXT: %[[N:.*]], %[[S:.*]] = llm.add_rms_norm %arg0, %arg1, %[[W1]] {eps = 9.9999999999999995E-7 : f64}
// CHECK-NEXT: %[[EARLY:.*]] = llm.add %[[S]], %[[S]]
// CHECK-NEXT: %[[W2:.*]] = llm.weight "n2"
// CHECK-NEXT: %[[N2:.*]] = llm.rms_norm %[[S]], %[[W2]]
// CHECK-NEXT: return %[[N]], %[[N2]], %[[EARLY]]
func.func @two_norms(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) {
  %s = llm.add %a, %b : tensor<?x64xf32>
  %early = llm.add %s, %s : tensor<?x64xf32>
  %w1 = llm.weight "n1" : tensor<64xf32>
  %n1 = llm.rms_norm %s, %w1 {eps = 1.0e-6 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %w2 = llm.weight "n2" : tensor<64xf32>
  %n2 = llm.rms_norm %s, %w2 {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  return %n1, %n2, %early : tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>
}
