"""The replay: transitions stored once per frame, sampled into minibatches, checkpointed whole
(:mod:`.buffer`)."""
