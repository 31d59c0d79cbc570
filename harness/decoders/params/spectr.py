"""``spectr``: SpecInfer's keys (m drafts of γ tokens), another acceptance rule."""
from harness.decoders.params.specinfer import MultiDraftParams

Params = MultiDraftParams
