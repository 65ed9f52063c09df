"""Training utilities around kit.nn and kit.parallel (the wings Chainer's `training/` has).

    earlystopping          DL4J's early stopping: trainers (earlystopping_config: conditions,
                           score calculators, savers)
    listeners              score and performance lines, a stats recorder, a dashboard, a progress bar
    compare                one job on 1..N devices, with the scaling model beside it
                           (comparison: the table it returns; scaling: the model)

`from kit import earlystopping` and `kit.listeners` keep working.
"""
