"""Text encoding: conditioning tensors, the encoder family, the prompt text found through the
graph and the conditioning step.
"""
