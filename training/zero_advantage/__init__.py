"""The actor's update leaves out the sequences whose advantage is 0 where that is exact: `rules` decides whether a
run qualifies (read by the launch and the trainer, no verl import), `engine` leaves them out inside the FSDP engine
(in every training worker)."""
