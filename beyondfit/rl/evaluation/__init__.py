"""Evaluating a policy: the evaluator of training time (:mod:`.evaluator`), the confirming
evaluation at a run's end (:mod:`.confirm`), the saved policy file and ``play``."""
