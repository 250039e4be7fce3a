"""The run engine: spans and the sampler, the recorder of a prompt's run, the store of runs, what a
prompt says and which inputs changed, the memory picture of upstream work, GPU busy time, the live
view and runtime settings. Below every stage; imports no stage."""
