"""Test helpers, in one package: toy models with an enumerable vocabulary (:mod:`~harness.testing.toy`), their
exact distributions and the statistics that compare samples with them (:mod:`~harness.testing.distributions`),
and γ-policy doubles (:mod:`~harness.testing.policies`). Used by the tests and the study scripts; nothing
else in the package imports it."""
from harness.testing.distributions import (all_sequences, chi_square_pvalue, exact_sequence_distribution,
                                           next_token_probs, sample_generations, total_variation, tv_bound)
from harness.testing.toy import ToyTokenizer, near_pair, toy_model, toy_pair

__all__ = ["ToyTokenizer", "all_sequences", "chi_square_pvalue", "exact_sequence_distribution", "near_pair",
           "next_token_probs", "sample_generations", "toy_model", "toy_pair", "total_variation", "tv_bound"]
