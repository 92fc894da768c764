"""The TRL recipe of docs/recipes/trl.md, second part: the trainer subclass (needs TRL)."""

# --8<-- [start:recipe]
from trl import GRPOTrainer


class DumpingGRPOTrainer(GRPOTrainer):
    """GRPOTrainer that writes both logprob sides of every training generation batch."""

    def __init__(self, *args, dump_dir: str = "mismatch_dumps", dump_tags=None, **kwargs):
        super().__init__(*args, **kwargs)
        rank = self.accelerator.process_index  # one file per process and step
        self.mismatch_dump = DumpWriter(dump_dir, tags=dump_tags, rank=rank)

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if self.model.training:  # not the evaluation batches
            dump_mismatch(self.mismatch_dump, out, self.state.global_step)
        return out


# --8<-- [end:recipe]

# the recipe's first part (in a trainer's code: the same module)
from tests.recipes.trl_dump import DumpWriter, dump_mismatch  # noqa: E402
