// RUN: llmc-opt %s -split-input-file -verify-diagnostics --llm-kv-cache-layout

// Layers disagree on the cache geometry.
func.func @heads_disagree(%k: tensor<?x32xf32>, %k2: tensor<?x64xf32>, %kv: !llm.kv_cache, %b: !llm.batch) -> !llm.kv_cache {
  // expected-note @+1 {{cache geometry first set here}}
  %kv1 = llm.kv_store %k, %k, %kv, %b {layer = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64}
      : tensor<?x32xf32>, tensor<?x32xf32>
  // expected-error @+1 {{'llm.kv_store' op at layer 1 has num_kv_heads 4 and head_dim 16, but the KV cache has num_kv_heads 2 and head_dim 16}}
  %kv2 = llm.kv_store %k2, %k2, %kv1, %b {layer = 1 : i64, num_kv_heads = 4 : i64, head_dim = 16 : i64}
      : tensor<?x64xf32>, tensor<?x64xf32>
  return %kv2 : !llm.kv_cache
}

// -----

func.func @head_dim_disagree(%k: tensor<?x32xf32>, %q: tensor<?x64xf32>, %kv: !llm.kv_cache, %b: !llm.batch) -> tensor<?x64xf32> {
  // expected-note @+1 {{cache geometry first set here}}
  %kv1 = llm.kv_store %k, %k, %kv, %b {layer = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64}
      : tensor<?x32xf32>, tensor<?x32xf32>
  // expected-error @+1 {{'llm.paged_attention' op at layer 0 has num_kv_heads 2 and head_dim 32, but the KV cache has num_kv_heads 2 and head_dim 16}}
  %o = llm.paged_attention %q, %kv1, %b {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64,
                                         head_dim = 32 : i64, scale = 0.25 : f64}
      : tensor<?x64xf32> -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}

// -----

func.func @unwritten_layer(%k: tensor<?x32xf32>, %q: tensor<?x64xf32>, %kv: !llm.kv_cache, %b: !llm.batch) -> tensor<?x64xf32> {
  %kv1 = llm.kv_store %k, %k, %kv, %b {layer = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64}
      : tensor<?x32xf32>, tensor<?x32xf32>
  // expected-error @+1 {{'llm.paged_attention' op reads KV-cache layer 1, which no llm.kv_store writes}}
  %o = llm.paged_attention %q, %kv1, %b {layer = 1 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64,
                                         head_dim = 16 : i64, scale = 0.25 : f64}
      : tensor<?x64xf32> -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}
