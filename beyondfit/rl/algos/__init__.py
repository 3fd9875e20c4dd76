"""Algorithms as loss closures: policy gradient (:mod:`.onpolicy`), SAC, TD3 and DQN
(:mod:`.offpolicy`), what an off-policy algorithm declares (:mod:`.algorithm`), auxiliary
self-supervised terms, PPO's KL stop and the env-step schedules."""
