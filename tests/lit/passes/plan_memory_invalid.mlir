// RUN: llmc-opt %s -split-input-file -verify-diagnostics --llm-plan-memory

func.func private @external() -> tensor<?x?xf32>

func.func @dynamic_width() -> tensor<?x?xf32> {
  // expected-error @+1 {{'func.call' op result #0 of type 'tensor<?x?xf32>' has no static row size to plan}}
  %0 = func.call @external() : () -> tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}
