"""simworld.eval: how faithfully a world model predicts reality (`simworld eval`).

    from simworld.eval.run import EvalConfig, evaluate
    report = evaluate(EvalConfig(out="out/eval", model="default"))

`metrics` (pure batched functions, also the training rewards), `embedding` (the
all-MiniLM-L6-v2 encoder), `predictors` and `baselines` (what is evaluated), `scoring` and
`breakdown` (per-step scores, means with bootstrap intervals, groups), `closed_loop`
(replay on the model's own predictions), `report` (JSON, Markdown, PNG) and `run`.
"""
