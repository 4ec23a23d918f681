// RUN: llmc-opt %s -split-input-file -verify-diagnostics

func.func @weight_dynamic() {
  // expected-error @+1 {{result must be a statically shaped f32 tensor of rank >= 1, got 'tensor<?x64xf32>'}}
  %w = llm.weight "w" : tensor<?x64xf32>
  return
}

// -----

func.func @weight_dtype() {
  // expected-error @+1 {{result must be a statically shaped f32 tensor}}
  %w = llm.weight "w" : tensor<4x64xf16>
  return
}

// -----

func.func @weight_empty_name() {
  // expected-error @+1 {{name must not be empty}}
  %w = llm.weight "" : tensor<4x64xf32>
  return
}

// -----

func.func @concat_one_input() {
  %a = llm.weight "a" : tensor<4x8xf32>
  // expected-error @+1 {{needs at least two inputs, got 1}}
  %c = llm.weight_concat %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @concat_not_weight(%a: tensor<4x8xf32>) {
  %b = llm.weight "b" : tensor<4x8xf32>
  // expected-error @+1 {{operand #0 must be produced by llm.weight or llm.weight_concat}}
  %c = llm.weight_concat %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  return
}

// -----

func.func @concat_other_dim() {
  %a = llm.weight "a" : tensor<4x8xf32>
  %b = llm.weight "b" : tensor<4x16xf32>
  // expected-error @+1 {{operand #1 has dim 1 = 16 but operand #0 has 8}}
  %c = llm.weight_concat %a, %b : (tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<8x8xf32>
  return
}

// -----

func.func @concat_rank() {
  %a = llm.weight "a" : tensor<4x8xf32>
  %b = llm.weight "b" : tensor<8xf32>
  // expected-error @+1 {{operand #1 must be a statically shaped 2-D f32 tensor, got 'tensor<8xf32>'}}
  %c = llm.weight_concat %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<8x8xf32>
  return
}

// -----

func.func @concat_sum() {
  %a = llm.weight "a" : tensor<4x8xf32>
  %b = llm.weight "b" : tensor<2x8xf32>
  // expected-error @+1 {{result dim 0 must be 6 (sum of the operands along axis), got 8}}
  %c = llm.weight_concat %a, %b : (tensor<4x8xf32>, tensor<2x8xf32>) -> tensor<8x8xf32>
  return
}

// -----

func.func @concat_axis() {
  %a = llm.weight "a" : tensor<4x8xf32>
  %b = llm.weight "b" : tensor<2x8xf32>
  // expected-error @+1 {{axis 2 is out of range for rank 2}}
  %c = llm.weight_concat %a, %b {axis = 2 : i64} : (tensor<4x8xf32>, tensor<2x8xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @embedding_tokens(%t: tensor<?xi64>) {
  %e = llm.weight "e" : tensor<256x64xf32>
  // expected-error @+1 {{tokens must be a 1-D i32 tensor, got 'tensor<?xi64>'}}
  %x = llm.embedding %t, %e : (tensor<?xi64>, tensor<256x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @embedding_width(%t: tensor<?xi32>) {
  %e = llm.weight "e" : tensor<256x64xf32>
  // expected-error @+1 {{result width 32 must equal the table's row size 64}}
  %x = llm.embedding %t, %e : (tensor<?xi32>, tensor<256x64xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @embedding_rows(%t: tensor<4xi32>) {
  %e = llm.weight "e" : tensor<256x64xf32>
  // expected-error @+1 {{row count of tokens (4) differs from row count of result (5)}}
  %x = llm.embedding %t, %e : (tensor<4xi32>, tensor<256x64xf32>) -> tensor<5x64xf32>
  return
}

// -----

func.func @activation_dynamic_width(%x: tensor<?x?xf32>) {
  %w = llm.weight "w" : tensor<64xf32>
  // expected-error @+1 {{x must be a 2-D f32 tensor [rows, width] with a static width, got 'tensor<?x?xf32>'}}
  %y = llm.rms_norm %x, %w {eps = 1.0e-5 : f64} : (tensor<?x?xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @rms_norm_group(%x: tensor<?x64xf32>) {
  %w = llm.weight "w" : tensor<24xf32>
  // expected-error @+1 {{x width 64 is not a multiple of the weight size 24}}
  %y = llm.rms_norm %x, %w {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<24xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @rms_norm_eps(%x: tensor<?x64xf32>) {
  %w = llm.weight "w" : tensor<64xf32>
  // expected-error @+1 {{eps must be finite and non-negative, got -1}}
  %y = llm.rms_norm %x, %w {eps = -1.0 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @rms_norm_result(%x: tensor<?x64xf32>) {
  %w = llm.weight "w" : tensor<64xf32>
  // expected-error @+1 {{result width 32 must equal x width 64}}
  %y = llm.rms_norm %x, %w {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x32xf32>
  return
}

// -----

// expected-note @+1 {{prior use here}}
func.func @add_types(%a: tensor<?x64xf32>, %b: tensor<?x32xf32>) {
  // expected-error @+1 {{use of value '%b' expects different type than prior uses: 'tensor<?x64xf32>' vs 'tensor<?x32xf32>'}}
  %s = llm.add %a, %b : tensor<?x64xf32>
  return
}

// -----

func.func @add_generic(%a: tensor<?x64xf32>, %b: tensor<?x32xf32>) {
  // expected-error @+1 {{all of {lhs, rhs, result} have same type}}
  %s = "llm.add"(%a, %b) : (tensor<?x64xf32>, tensor<?x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @add_rms_norm_weight(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>) {
  %w = llm.weight "w" : tensor<16xf32>
  // expected-error @+1 {{weight size 16 must equal the width 64 (add_rms_norm is a plain RMSNorm)}}
  %n, %s = llm.add_rms_norm %a, %b, %w {eps = 1.0e-5 : f64}
      : (tensor<?x64xf32>, tensor<?x64xf32>, tensor<16xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>)
  return
}

// -----

func.func @add_rms_norm_widths(%a: tensor<?x64xf32>, %b: tensor<?x32xf32>) {
  %w = llm.weight "w" : tensor<64xf32>
  // expected-error @+1 {{widths must agree, got x 64, residual 32, normed 64, sum 64}}
  %n, %s = llm.add_rms_norm %a, %b, %w {eps = 1.0e-5 : f64}
      : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>)
  return
}

// -----

func.func @linear_k(%x: tensor<?x64xf32>) {
  %w = llm.weight "w" : tensor<128x32xf32>
  // expected-error @+1 {{weight is [128, 32] ([out, in]) but x has width 64}}
  %y = llm.linear %x, %w : (tensor<?x64xf32>, tensor<128x32xf32>) -> tensor<?x128xf32>
  return
}

// -----

func.func @linear_n(%x: tensor<?x64xf32>) {
  %w = llm.weight "w" : tensor<128x64xf32>
  // expected-error @+1 {{result width 64 must equal the weight's output size 128}}
  %y = llm.linear %x, %w : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @linear_bias(%x: tensor<?x64xf32>) {
  %w = llm.weight "w" : tensor<128x64xf32>
  %b = llm.weight "b" : tensor<64xf32>
  // expected-error @+1 {{bias size 64 must equal the weight's output size 128}}
  %y = llm.linear %x, %w, %b : (tensor<?x64xf32>, tensor<128x64xf32>, tensor<64xf32>) -> tensor<?x128xf32>
  return
}

// -----

func.func @linear_weight_dynamic(%x: tensor<?x64xf32>, %w: tensor<?x64xf32>) {
  // expected-error @+1 {{weight must be a statically shaped 2-D f32 tensor, got 'tensor<?x64xf32>'}}
  %y = llm.linear %x, %w : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x128xf32>
  return
}

// -----

func.func @linear_rows(%x: tensor<4x64xf32>) {
  %w = llm.weight "w" : tensor<128x64xf32>
  // expected-error @+1 {{row count of x (4) differs from row count of result (3)}}
  %y = llm.linear %x, %w : (tensor<4x64xf32>, tensor<128x64xf32>) -> tensor<3x128xf32>
  return
}

// -----

func.func @split_sum(%x: tensor<?x128xf32>) {
  // expected-error @+1 {{sizes sum to 96 but x has width 128}}
  %a, %b = llm.split %x sizes [64, 32] : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>
  return
}

// -----

func.func @split_count(%x: tensor<?x128xf32>) {
  // expected-error @+1 {{has 2 results but 3 sizes}}
  %a, %b = llm.split %x sizes [64, 32, 32] : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x64xf32>
  return
}

// -----

func.func @split_result_width(%x: tensor<?x128xf32>) {
  // expected-error @+1 {{result #1 has width 64 but size #1 is 32}}
  %a, %b, %c = llm.split %x sizes [64, 32, 32] : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x32xf32>
  return
}

// -----

func.func @split_size_zero(%x: tensor<?x128xf32>) {
  // expected-error @+1 {{size #1 must be positive, got 0}}
  %a, %b = llm.split %x sizes [128, 0] : tensor<?x128xf32> -> tensor<?x128xf32>, tensor<?x0xf32>
  return
}

// -----

func.func @split_empty(%x: tensor<?x128xf32>) {
  // expected-error @+1 {{sizes must not be empty}}
  "llm.split"(%x) {sizes = array<i64>} : (tensor<?x128xf32>) -> ()
  return
}

// -----

func.func @rope_width(%x: tensor<?x64xf32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{x width 64 must equal num_heads * head_dim = 2 * 16}}
  %y = llm.rope %x, %p {num_heads = 2 : i64, head_dim = 16 : i64, theta = 10000.0 : f64}
      : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @rope_odd_head_dim(%x: tensor<?x60xf32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{head_dim must be even, got 15}}
  %y = llm.rope %x, %p {num_heads = 4 : i64, head_dim = 15 : i64, theta = 10000.0 : f64}
      : (tensor<?x60xf32>, tensor<?xi32>) -> tensor<?x60xf32>
  return
}

// -----

func.func @rope_style(%x: tensor<?x64xf32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{style must be 'neox' or 'interleaved', got 'gptj'}}
  %y = llm.rope %x, %p {num_heads = 4 : i64, head_dim = 16 : i64, theta = 10000.0 : f64, style = "gptj"}
      : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @rope_type(%x: tensor<?x64xf32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{rope_type must be 'default', 'linear' or 'llama3', got 'yarn'}}
  %y = llm.rope %x, %p {num_heads = 4 : i64, head_dim = 16 : i64, theta = 10000.0 : f64, rope_type = "yarn"}
      : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @rope_llama3_max_pos(%x: tensor<?x64xf32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{llama3 rope needs a positive original_max_position, got 0}}
  %y = llm.rope %x, %p {num_heads = 4 : i64, head_dim = 16 : i64, theta = 500000.0 : f64,
                        rope_type = "llama3", factor = 8.0 : f64}
      : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @rope_llama3_freq(%x: tensor<?x64xf32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{llama3 rope needs 0 < low_freq_factor < high_freq_factor, got 4.000000e+00 and 1.000000e+00}}
  %y = llm.rope %x, %p {num_heads = 4 : i64, head_dim = 16 : i64, theta = 500000.0 : f64,
                        rope_type = "llama3", factor = 8.0 : f64, low_freq_factor = 4.0 : f64,
                        high_freq_factor = 1.0 : f64, original_max_position = 8192 : i64}
      : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @rope_linear_factor(%x: tensor<?x64xf32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{factor must be positive for rope_type 'linear', got 0}}
  %y = llm.rope %x, %p {num_heads = 4 : i64, head_dim = 16 : i64, theta = 10000.0 : f64,
                        rope_type = "linear", factor = 0.0 : f64}
      : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @rope_positions(%x: tensor<?x64xf32>, %p: tensor<?xf32>) {
  // expected-error @+1 {{positions must be a 1-D i32 tensor, got 'tensor<?xf32>'}}
  %y = llm.rope %x, %p {num_heads = 4 : i64, head_dim = 16 : i64, theta = 10000.0 : f64}
      : (tensor<?x64xf32>, tensor<?xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @rope_theta(%x: tensor<?x64xf32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{theta must be positive, got 0}}
  %y = llm.rope %x, %p {num_heads = 4 : i64, head_dim = 16 : i64, theta = 0.0 : f64}
      : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @kv_store_width(%k: tensor<?x32xf32>, %v: tensor<?x32xf32>, %kv: !llm.kv_cache, %b: !llm.batch) {
  // expected-error @+1 {{k and v widths (32, 32) must equal num_kv_heads * head_dim = 4 * 16}}
  %kv1 = llm.kv_store %k, %v, %kv, %b {layer = 0 : i64, num_kv_heads = 4 : i64, head_dim = 16 : i64}
      : tensor<?x32xf32>, tensor<?x32xf32>
  return
}

// -----

func.func @kv_store_layer(%k: tensor<?x32xf32>, %v: tensor<?x32xf32>, %kv: !llm.kv_cache, %b: !llm.batch) {
  // expected-error @+1 {{layer must be non-negative, got -1}}
  %kv1 = llm.kv_store %k, %v, %kv, %b {layer = -1 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64}
      : tensor<?x32xf32>, tensor<?x32xf32>
  return
}

// -----

func.func @kv_store_partial_layout(%k: tensor<?x32xf32>, %v: tensor<?x32xf32>, %kv: !llm.kv_cache, %b: !llm.batch) {
  // expected-error @+1 {{block_size, kv_dtype and layout must be set together}}
  %kv1 = llm.kv_store %k, %v, %kv, %b {layer = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, block_size = 16 : i64}
      : tensor<?x32xf32>, tensor<?x32xf32>
  return
}

// -----

func.func @kv_store_layout(%k: tensor<?x32xf32>, %v: tensor<?x32xf32>, %kv: !llm.kv_cache, %b: !llm.batch) {
  // expected-error @+1 {{unknown kv layout 'slot_major' (expected 'block_head_slot_dim')}}
  %kv1 = llm.kv_store %k, %v, %kv, %b {layer = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64,
                                       block_size = 16 : i64, kv_dtype = "f32", layout = "slot_major"}
      : tensor<?x32xf32>, tensor<?x32xf32>
  return
}

// -----

func.func @kv_store_dtype(%k: tensor<?x32xf32>, %v: tensor<?x32xf32>, %kv: !llm.kv_cache, %b: !llm.batch) {
  // expected-error @+1 {{kv_dtype must be one of f32, f16, bf16, fp8, int8, got 'i4'}}
  %kv1 = llm.kv_store %k, %v, %kv, %b {layer = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64,
                                       block_size = 16 : i64, kv_dtype = "i4", layout = "block_head_slot_dim"}
      : tensor<?x32xf32>, tensor<?x32xf32>
  return
}

// -----

func.func @kv_store_block_size(%k: tensor<?x32xf32>, %v: tensor<?x32xf32>, %kv: !llm.kv_cache, %b: !llm.batch) {
  // expected-error @+1 {{block_size must be positive, got 0}}
  %kv1 = llm.kv_store %k, %v, %kv, %b {layer = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64,
                                       block_size = 0 : i64, kv_dtype = "f32", layout = "block_head_slot_dim"}
      : tensor<?x32xf32>, tensor<?x32xf32>
  return
}

// -----

func.func @kv_store_kv_type(%k: tensor<?x32xf32>, %v: tensor<?x32xf32>, %kv: !llm.batch, %b: !llm.batch) {
  // expected-error @+1 {{operand #2 must be the paged KV cache, threaded through kv_store, but got '!llm.batch'}}
  %kv1 = "llm.kv_store"(%k, %v, %kv, %b) {layer = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64}
      : (tensor<?x32xf32>, tensor<?x32xf32>, !llm.batch, !llm.batch) -> !llm.kv_cache
  return
}

// -----

func.func @attention_gqa(%q: tensor<?x96xf32>, %kv: !llm.kv_cache, %b: !llm.batch) {
  // expected-error @+1 {{num_heads 6 must be a multiple of num_kv_heads 4}}
  %o = llm.paged_attention %q, %kv, %b {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 4 : i64,
                                        head_dim = 16 : i64, scale = 0.25 : f64}
      : tensor<?x96xf32> -> tensor<?x96xf32>
  return
}

// -----

func.func @attention_width(%q: tensor<?x64xf32>, %kv: !llm.kv_cache, %b: !llm.batch) {
  // expected-error @+1 {{q width 64 must equal num_heads * head_dim = 8 * 16}}
  %o = llm.paged_attention %q, %kv, %b {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 2 : i64,
                                        head_dim = 16 : i64, scale = 0.25 : f64}
      : tensor<?x64xf32> -> tensor<?x64xf32>
  return
}

// -----

func.func @attention_result(%q: tensor<?x64xf32>, %kv: !llm.kv_cache, %b: !llm.batch) {
  // expected-error @+1 {{result width 32 must equal q width 64}}
  %o = llm.paged_attention %q, %kv, %b {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64,
                                        head_dim = 16 : i64, scale = 0.25 : f64}
      : tensor<?x64xf32> -> tensor<?x32xf32>
  return
}

// -----

func.func @attention_scale(%q: tensor<?x64xf32>, %kv: !llm.kv_cache, %b: !llm.batch) {
  // expected-error @+1 {{scale must be positive, got 0}}
  %o = llm.paged_attention %q, %kv, %b {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64,
                                        head_dim = 16 : i64, scale = 0.0 : f64}
      : tensor<?x64xf32> -> tensor<?x64xf32>
  return
}

// -----

func.func @attention_window(%q: tensor<?x64xf32>, %kv: !llm.kv_cache, %b: !llm.batch) {
  // expected-error @+1 {{sliding_window must be non-negative, got -2}}
  %o = llm.paged_attention %q, %kv, %b {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64,
                                        head_dim = 16 : i64, scale = 0.25 : f64, sliding_window = -2 : i64}
      : tensor<?x64xf32> -> tensor<?x64xf32>
  return
}

// -----

func.func @attention_heads(%q: tensor<?x64xf32>, %kv: !llm.kv_cache, %b: !llm.batch) {
  // expected-error @+1 {{num_kv_heads must be positive, got 0}}
  %o = llm.paged_attention %q, %kv, %b {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 0 : i64,
                                        head_dim = 16 : i64, scale = 0.25 : f64}
      : tensor<?x64xf32> -> tensor<?x64xf32>
  return
}

// -----

func.func @silu_mul_fused_width(%gu: tensor<?x256xf32>) {
  // expected-error @+1 {{fused gate_up width 256 must be twice the result width 256}}
  %a = llm.silu_mul %gu : (tensor<?x256xf32>) -> tensor<?x256xf32>
  return
}

// -----

func.func @silu_mul_widths(%g: tensor<?x128xf32>, %u: tensor<?x64xf32>) {
  // expected-error @+1 {{gate, up and result widths must agree, got 128, 64, 128}}
  %a = llm.silu_mul %g, %u : (tensor<?x128xf32>, tensor<?x64xf32>) -> tensor<?x128xf32>
  return
}

// -----

func.func @silu_mul_arity(%g: tensor<?x128xf32>) {
  // expected-error @+1 {{takes one fused [rows, 2*I] operand or two [rows, I] operands, got 3 operands}}
  %a = llm.silu_mul %g, %g, %g : (tensor<?x128xf32>, tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
  return
}

// -----

func.func @logits_hidden(%x: tensor<?x64xf32>, %b: !llm.batch) {
  %w = llm.weight "lm_head" : tensor<256x32xf32>
  // expected-error @+1 {{weight is [256, 32] ([vocab, hidden]) but x has width 64}}
  %l = llm.logits %x, %w, %b : (tensor<?x64xf32>, tensor<256x32xf32>, !llm.batch) -> tensor<?x256xf32>
  return
}

// -----

func.func @logits_vocab(%x: tensor<?x64xf32>, %b: !llm.batch) {
  %w = llm.weight "lm_head" : tensor<256x64xf32>
  // expected-error @+1 {{result width 128 must equal the vocabulary size 256}}
  %l = llm.logits %x, %w, %b : (tensor<?x64xf32>, tensor<256x64xf32>, !llm.batch) -> tensor<?x128xf32>
  return
}

// -----

func.func @permute_columns_width(%x: tensor<?x4xf32>) {
  // expected-error @+1 {{perm has 3 entries but x has width 4}}
  %y = llm.permute_columns %x perm [0, 2, 1] : tensor<?x4xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @permute_columns_repeat(%x: tensor<?x4xf32>) {
  // expected-error @+1 {{perm[2] = 1 repeats an earlier entry}}
  %y = llm.permute_columns %x perm [0, 1, 1, 3] : tensor<?x4xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @permute_columns_range(%x: tensor<?x4xf32>) {
  // expected-error @+1 {{perm[3] = 4 is outside [0, 4)}}
  %y = llm.permute_columns %x perm [0, 1, 2, 4] : tensor<?x4xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @permute_columns_result(%x: tensor<?x4xf32>) {
  // expected-error @+1 {{result width 8 must equal x's width 4}}
  %y = llm.permute_columns %x perm [0, 1, 2, 3] : tensor<?x4xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @rope_kv_store_width(%qkv: tensor<?x96xf32>, %p: tensor<?xi32>, %kv: !llm.kv_cache, %b: !llm.batch) {
  // expected-error @+1 {{qkv width 96 must equal (num_heads + 2 * num_kv_heads) * head_dim = (4 + 2 * 2) * 16}}
  %q, %kv1 = llm.rope_kv_store %qkv, %p, %kv, %b {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64,
                                                   head_dim = 16 : i64, theta = 10000.0 : f64}
      : tensor<?x96xf32>, tensor<?xi32> -> tensor<?x64xf32>
  return
}

// -----

func.func @rope_kv_store_groups(%qkv: tensor<?x176xf32>, %p: tensor<?xi32>, %kv: !llm.kv_cache, %b: !llm.batch) {
  // expected-error @+1 {{num_heads 5 must be a multiple of num_kv_heads 3}}
  %q, %kv1 = llm.rope_kv_store %qkv, %p, %kv, %b {layer = 0 : i64, num_heads = 5 : i64, num_kv_heads = 3 : i64,
                                                   head_dim = 16 : i64, theta = 10000.0 : f64}
      : tensor<?x176xf32>, tensor<?xi32> -> tensor<?x80xf32>
  return
}

// -----

func.func @rope_kv_store_rope_type(%qkv: tensor<?x128xf32>, %p: tensor<?xi32>, %kv: !llm.kv_cache, %b: !llm.batch) {
  // expected-error @+1 {{rope_type must be 'default', 'linear' or 'llama3', got 'yarn'}}
  %q, %kv1 = llm.rope_kv_store %qkv, %p, %kv, %b {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64,
                                                   head_dim = 16 : i64, theta = 10000.0 : f64, rope_type = "yarn"}
      : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x64xf32>
  return
}
