"""Jobs built on a fitted classifier: export (ONNX), distillation, batch prediction on Ray, predictions written as
JSON lines, and the label audit."""
