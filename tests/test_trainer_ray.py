"""verl's real entry (`run_ppo`) with our Ray task runner, on CPU, up to the GPU boundary.

It proves what can only be seen across processes: the `reasoning_gym` trainer is found by verl's registry inside the
TaskRunner actor (not just in the driver), and our `_init_dataloader` runs there on the real stream, before verl stops
at the resource pool because this machine has no GPU.
"""

import pytest
import ray

from training.config import compose_config, resolve_config
from training.train_grpo import launch


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_trainer_is_found_and_builds_its_data_inside_the_ray_actor(tiny_model_dir):
    import torch

    if torch.cuda.is_available():
        pytest.skip("on a GPU machine this would train; the GPU test covers that")
    cfg = resolve_config(compose_config("quickstart", [
        "model=tiny", "data.max_prompt_length=512", "env.validation_size=4", "+ray_kwargs.ray_init.num_cpus=16",
        "reward.num_workers=1", "trainer.logger=[console]"]), gpu_count=1)
    try:
        with pytest.raises(ray.exceptions.RayTaskError) as info:
            launch(cfg)
    finally:
        ray.shutdown()
    text = str(info.value)
    assert "Unknown trainer" not in text and "_ReasoningGymTaskRunner" in text
    assert "_setup" in text and "create_resource_pool" in text  # past _init_tokenizer and our _init_dataloader
    assert "Total available GPUs 0 is less than total desired GPUs 1" in text
