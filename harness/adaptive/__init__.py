"""Adaptive speculation (the adaptive paper): γ policies (§4), the analytic model (App. B), and draft-model
selection (§5). Pure Python/numpy: nothing here loads a model."""
