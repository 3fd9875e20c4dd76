"""Collecting data from envs: what every collector shares (:mod:`.env_collector`: seeds,
episodes, the envs' state rebuilt on resume), the on-policy rollout collector
(:mod:`.onpolicy`), the off-policy replay collector (:mod:`.offpolicy`), returns and
advantages, observation and reward normalization, the update-to-data ratio."""
