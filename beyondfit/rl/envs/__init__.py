"""Making envs: vector envs with next-step autoreset and observation/action conversion
(:mod:`.vector`), the Atari and MinAtar families and Atari's wrappers (:mod:`.suites`),
envpool's Atari pool (:mod:`.envpool_atari`), the action rule shared by collectors
(:mod:`.actions`)."""
