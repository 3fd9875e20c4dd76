"""The compiled step (``Engine(compile=True)``): each optimizer's update traced as one graph
(:mod:`.compiled`), the optimizer as the graph traces it (:mod:`.traced_optimizer`), what the
step asks of inductor (:mod:`.inductor_options`), ``torch.compile`` with its compilations
counted and reported (:mod:`.graphs`), batched products rewritten for a CPU graph
(:mod:`.products`). Every private torch surface the package relies on lives in this folder,
and :mod:`.probe` asks this torch, once per process, whether it still has each."""
