"""training/trainer/thinking_lengths.py: the speed stages' drawn response lengths are a long tail, the same in
every run."""

import statistics

from training.trainer.thinking_lengths import AT_LIMIT, SHORTEST, drawn_length


def test_lengths_are_a_long_tail_with_a_share_at_the_limit():
    lengths = [drawn_length(index, session, 4096) for index in range(500) for session in range(8)]
    assert min(lengths) >= SHORTEST * 4096 == 256 and max(lengths) == 4096
    at_limit = sum(length == 4096 for length in lengths) / len(lengths)
    assert abs(at_limit - AT_LIMIT) < 0.02
    assert 1000 < statistics.median(lengths) < 1600  # log-uniform below the limit: most stop far short of it
    assert len({drawn_length(7, session, 4096) for session in range(8)}) > 4  # a group's samples differ


def test_a_length_depends_only_on_the_place_and_the_limit():
    assert drawn_length(3, 1, 4096) == drawn_length(3, 1, 4096)
    tiny = [drawn_length(index, 0, 24) for index in range(200)]  # a CPU rehearsal's limit: still a long tail
    assert min(tiny) == 1 and max(tiny) == 24 and statistics.median(tiny) < 12
