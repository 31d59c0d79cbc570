"""Issue 29.3: release 0.2's names are known only at the doors where they come in — the command line's override
rewriting and the decoding group's options, the Python API's door (``harness.methods``: deprecated parameter and
preset names), the file readers, and the ids of cells measured under identity version 1 — never by the decoders,
the draft selection or the decoding vocabulary, which use the current names at their source. The summaries'
``params`` keep their flat columns (:mod:`harness.adaptive.columns`), key for key and in order."""
import warnings

import pytest

from harness.methods import build_decoder, method_spec, read_decoding
from harness.testing import toy_pair
from test_names import _importers

#: module -> why it may know release 0.2's names
ALLOWED = {
    "cli/app.py": "the command line's override rewriting (upgrade_overrides)",
    "config/groups.py": "the decoding group keeps the deprecated preset names composable (old_presets)",
    "methods.py": "the Python API's door: deprecated parameter and preset names (upgrade_method_params, preset_name)",
    "results/store.py": "a file reader: records under their current names (current_names)",
    "analysis/tables.py": "a file reader: summaries and records under their current names (current_names)",
    "config/identity.py": "a reader of stored cells: the ids of cells measured under identity version 1 and stored "
                          "configs of any version compared in one layout (layout_0_2); new cells' ids (version 2) "
                          "do not use it",
}


def test_only_the_doors_import_the_legacy_names():
    assert _importers("harness.config.legacy") == set(ALLOWED)


POLICY_COLUMNS = ["gamma_policy", "gamma_min", "gamma_max", "acc_history", "acc_max", "acc_estimator", "time_window",
                  "q_state_len", "q_lr", "q_discount", "q_epsilon", "q_epsilon_warmup", "q_warmup_trials", "q_reward",
                  "hf_transient", "draft_selection", "selection_fit_prompts", "selection_features"]


@pytest.mark.parametrize("policy", [None, {"name": "qlearning", "lr": 0.1}])
def test_a_speculative_summary_keeps_its_flat_policy_columns(policy):
    spec = method_spec("sd", {"gamma": 3}, decoding="greedy", gamma_policy=policy)
    params = spec.params_dict()
    assert list(params)[-len(POLICY_COLUMNS):] == POLICY_COLUMNS
    assert params["gamma_policy"] == (policy or {}).get("name", "fixed") and params["draft_selection"] == "none"
    assert params["q_lr"] == (0.1 if policy else 0.05) and params["gamma_min"] == 1 and params["hf_transient"] is False
    assert build_decoder("sd", toy_pair(), gamma=3, decoding="greedy", gamma_policy=policy).params_dict() == params


def test_a_selection_fills_its_columns():
    spec = method_spec("sd", {}, decoding="greedy", draft_selection={"name": "ols", "fit_prompts": 4})
    params = spec.params_dict()
    assert list(params)[-len(POLICY_COLUMNS):] == POLICY_COLUMNS
    assert (params["draft_selection"], params["selection_fit_prompts"], params["selection_features"]) == ("ols", 4, 8)


def test_the_deprecated_preset_is_read_at_the_door_only():
    from harness.decoding import as_decoding

    with pytest.warns(DeprecationWarning, match="sampling_dsbd"):
        assert read_decoding("sampling_seed000") == as_decoding("sampling_dsbd")
    with pytest.warns(DeprecationWarning, match="sampling_dsbd"):
        assert read_decoding({"name": "sampling_seed000", "temperature": 1.0, "top_k": 10, "top_p": 0.8}).name == \
            "sampling_dsbd"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_decoding({"temperature": 0.5}).name == "custom"
    with pytest.raises(Exception, match="unknown decoding 'sampling_seed000'"):
        as_decoding("sampling_seed000")  # the vocabulary itself knows the current names only
