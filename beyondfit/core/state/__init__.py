"""What a checkpoint holds of a run and what a restore must check first: the engine's
``state_dict`` with its whole-or-nothing restore (:mod:`.engine_state`), the run's counters and
resume position (:mod:`.position`), the words every saved field is checked in (:mod:`.checks`),
an optimizer's saved state (:mod:`.optimizer`) and the checkpoint file format
(:mod:`.serialization`)."""
