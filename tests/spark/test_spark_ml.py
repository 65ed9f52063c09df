"""kit.spark.ml: a Network as a pyspark.ml Estimator and Model. fit(df) trains as SparkNetwork does
(the same parameters); transform adds rawPrediction, probability and prediction on the executors
(the local Network.output's numbers); it sits in a Pipeline and a CrossValidator with
MulticlassClassificationEvaluator; the model saves and loads through MLlib's writers bit for
bit, and a changed file is refused; wrong columns and bad Params are refused naming them, and
the printed remedy runs."""

import hashlib
import json
import os
import re

import numpy as np
import pytest

from kit.data import load_digits
from kit.nn import Sgd, mlp
from kit.nn.persistence import ModelFileError
from kit.spark import NetworkClassificationModel, NetworkClassifier, ParameterAveragingTrainingMaster, SparkNetwork

N = 240
# one worker: its average is its own parameters, so averaging every 12 mini-batches trains as every 1 does,
# in one round an epoch (240 examples, 12 mini-batches of 20) where frequency 1 ran 12
OPTIONS = {"batch_size_per_worker": 20, "averaging_frequency": 12, "num_workers": 1, "rdd_training_approach": "DIRECT"}


@pytest.fixture(scope="module")
def spark(sc):
    from pyspark.sql import SparkSession

    return SparkSession(sc)


@pytest.fixture(scope="module")
def digits(spark):
    from pyspark.ml.linalg import Vectors

    train, _ = load_digits()
    x, y = train.features.numpy()[:N], train.labels.numpy()[:N].argmax(axis=1)
    rows = [(Vectors.dense(r.tolist()), float(v), f"digit {v}") for r, v in zip(x, y)]
    df = spark.createDataFrame(rows, ["features", "label", "name"]).coalesce(2).cache()
    return df, x, y


def _net():
    return mlp(64, hidden=(16,), n_out=10, updater=Sgd(0.1), seed=0)


@pytest.fixture(scope="module")
def fitted(digits):
    df, _, _ = digits
    return NetworkClassifier(_net(), epochs=2, masterOptions=OPTIONS).fit(df)


def test_fit_trains_what_spark_network_trains(sc, digits, fitted):
    df, _, _ = digits
    net = _net()
    SparkNetwork(sc, net, ParameterAveragingTrainingMaster(**OPTIONS)).fit(df, epochs=2)
    np.testing.assert_array_equal(fitted.network.params().numpy(), net.params().numpy())
    assert not np.array_equal(net.params().numpy(), _net().params().numpy())  # it trained


@pytest.mark.slow  # three fits: CI's slow set runs it
def test_fits_on_the_same_dataframe_prepare_the_data_once(digits, monkeypatch):
    """Like SparkNetwork's fits, the estimator's: the second fit on the same DataFrame with the same
    settings reuses the rounds the first prepared (counted at kit.spark.prepared.prepare_data), and
    trains on from the same data: a fresh fit's parameters again. Other settings prepare anew."""
    import kit.spark.training_master as tm

    df, _, _ = digits
    calls = []
    real = tm.prepare_data
    monkeypatch.setattr(tm, "prepare_data", lambda *a, **k: calls.append(1) or real(*a, **k))
    clf = NetworkClassifier(_net(), epochs=1, masterOptions=OPTIONS)
    first, second = clf.fit(df), clf.fit(df)
    assert len(calls) == 1, calls  # was 2: a new master, and a new cache, per fit
    np.testing.assert_array_equal(first.network.params().numpy(), second.network.params().numpy())
    other = {**OPTIONS, "batch_size_per_worker": 10}
    clf.copy({clf.masterOptions: json.dumps(other)}).fit(df)  # a copy shares the cache; other settings: anew
    assert len(calls) == 2, calls


def test_transform_adds_the_columns_on_the_executors_with_the_local_numbers(digits, fitted):
    df, x, _ = digits
    scored = fitted.transform(df)
    assert scored.columns == ["features", "label", "name", "rawPrediction", "probability", "prediction"]
    kinds = {f.name: f.dataType.simpleString() for f in scored.schema.fields}
    assert (kinds["rawPrediction"], kinds["probability"], kinds["prediction"]) == ("vector", "vector", "double")
    assert "MapInArrow" in scored._jdf.queryExecution().executedPlan().toString()  # a Python stage, not the driver
    rows = scored.select("rawPrediction", "probability", "prediction").collect()
    probability = np.array([r[1].toArray() for r in rows])
    local = fitted.network.output(x).numpy()
    np.testing.assert_allclose(probability, local, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.exp([r[0].toArray() for r in rows]), probability, rtol=1e-12)
    np.testing.assert_array_equal([r[2] for r in rows], local.argmax(axis=1))
    assert fitted.numClasses == 10


def test_an_output_column_set_to_empty_is_not_added(digits, fitted):
    df, _, _ = digits
    model = fitted.copy().setRawPredictionCol("").setProbabilityCol("")
    assert model.transform(df).columns == ["features", "label", "name", "prediction"]


@pytest.mark.slow  # a fit, four transforms and a pipeline's save and load: over 60 s on a loaded machine
def test_a_pipeline_fits_transforms_saves_and_loads(tmp_path, digits):
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.ml.feature import StringIndexer

    df, _, _ = digits
    indexed = StringIndexer(inputCol="name", outputCol="class")  # the label comes from a string column
    clf = NetworkClassifier(_net(), labelCol="class", epochs=3, masterOptions=OPTIONS)
    model = Pipeline(stages=[indexed, clf]).fit(df)
    assert isinstance(model.stages[-1], NetworkClassificationModel)
    evaluator = MulticlassClassificationEvaluator(labelCol="class", metricName="accuracy")
    accuracy = evaluator.evaluate(model.transform(df))
    assert accuracy > 0.25  # ten classes: chance is 0.1
    model.write().save(str(tmp_path / "pipeline"))  # MLlib's PipelineModel writer calls the model's
    again = PipelineModel.load(str(tmp_path / "pipeline"))
    assert isinstance(again.stages[-1], NetworkClassificationModel)
    want = model.transform(df).select("probability").collect()
    assert again.transform(df).select("probability").collect() == want
    assert evaluator.evaluate(again.transform(df)) == accuracy


@pytest.mark.slow  # five fits (two folds by two settings, then the best on all the data)
def test_a_cross_validator_picks_epochs_with_mllibs_evaluator(digits):
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    df, _, _ = digits
    clf = NetworkClassifier(_net(), masterOptions=OPTIONS)
    grid = ParamGridBuilder().addGrid(clf.epochs, [1, 4]).build()
    evaluator = MulticlassClassificationEvaluator(metricName="accuracy")
    cv = CrossValidator(estimator=clf, estimatorParamMaps=grid, evaluator=evaluator, numFolds=2, seed=0)
    model = cv.fit(df)
    assert len(model.avgMetrics) == 2 and all(0.0 <= m <= 1.0 for m in model.avgMetrics)
    assert model.avgMetrics[1] > model.avgMetrics[0]  # four epochs of SGD beat one on held-out folds
    assert isinstance(model.bestModel, NetworkClassificationModel)
    assert model.bestModel.getOrDefault("epochs") == 4
    assert evaluator.evaluate(model.transform(df)) > 0.25  # ten classes: chance is 0.1


def test_save_and_load_are_bit_exact_through_mllibs_writers(tmp_path, digits, fitted):
    df, _, _ = digits
    path = str(tmp_path / "model")
    fitted.write().save(path)
    with pytest.raises(Exception, match="already exists"):  # MLlib's rule: overwrite() to replace
        fitted.write().save(path)
    fitted.write().overwrite().save(path)
    loaded = NetworkClassificationModel.load(path)
    for key, array in fitted.network.state_arrays().items():
        np.testing.assert_array_equal(loaded.network.state_arrays()[key].numpy(), array.numpy())
    assert loaded.uid == fitted.uid
    assert {p.name: v for p, v in loaded.extractParamMap().items()} == {
        p.name: v for p, v in fitted.extractParamMap().items()
    }
    want = fitted.transform(df).select("probability").collect()
    assert loaded.transform(df).select("probability").collect() == want
    assert not any(name.endswith((".pkl", ".pickle")) for _, _, names in os.walk(path) for name in names)


def test_an_estimator_saves_and_loads_its_params(tmp_path):
    clf = NetworkClassifier(_net(), epochs=3, seed=7, masterOptions=OPTIONS, featuresCol="pixels")
    clf.write().save(str(tmp_path / "clf"))
    loaded = NetworkClassifier.load(str(tmp_path / "clf"))
    assert {p.name: v for p, v in loaded.extractParamMap().items()} == {
        p.name: v for p, v in clf.extractParamMap().items()
    }


def _flip_a_parameter_byte(path):
    data = bytearray(open(path, "rb").read())
    start = data.index(b"params.npy")
    data[start + 200] ^= 0x01  # inside the stored parameters
    open(path, "wb").write(bytes(data))


def _edit_metadata(path, edit):
    """Edit MLlib's metadata JSON as someone careful would: Hadoop's .crc beside it removed too."""
    (part,) = [p for p in os.listdir(os.path.join(path, "metadata")) if p.startswith("part-")]
    where = os.path.join(path, "metadata", part)
    meta = json.loads(open(where).read())
    edit(meta)
    open(where, "w").write(json.dumps(meta))
    crc = os.path.join(path, "metadata", f".{part}.crc")
    if os.path.exists(crc):
        os.remove(crc)


def _more_l2(meta):
    cfg = json.loads(meta["paramMap"]["networkConfig"])
    cfg["l2"] = 0.5
    meta["paramMap"]["networkConfig"] = json.dumps(cfg, sort_keys=True)


@pytest.mark.parametrize(
    ("tamper", "said"),
    [
        ("a flipped bit in the network file", r"network\.npz: its SHA-256 differs from the one the model's metadata"),
        ("another model's file in its place", r"network\.npz: its SHA-256 differs"),
        ("the metadata's configuration edited", r"the metadata's networkConfig is not the saved network's"),
    ],
)
def test_a_changed_model_is_refused(tmp_path, fitted, tamper, said):
    path = str(tmp_path / "model")
    fitted.write().save(path)
    data = os.path.join(path, "data", "network.npz")
    if tamper == "a flipped bit in the network file":
        _flip_a_parameter_byte(data)
    elif tamper == "another model's file in its place":
        _net().save(data)
    else:
        _edit_metadata(path, _more_l2)
    with pytest.raises(ModelFileError, match=said):
        NetworkClassificationModel.load(path)


def test_a_flipped_bit_is_caught_by_kits_own_check_too(tmp_path, fitted):
    """Past the metadata's SHA-256 (recomputed by whoever edits it), the file's own checks still refuse it."""
    path = str(tmp_path / "model")
    fitted.write().save(path)
    data = os.path.join(path, "data", "network.npz")
    _flip_a_parameter_byte(data)
    digest = hashlib.sha256(open(data, "rb").read()).hexdigest()
    _edit_metadata(path, lambda meta: meta["kit"].update(sha256=digest))
    with pytest.raises(ModelFileError, match=r"does not match its SHA-256|not a readable kit model file"):
        NetworkClassificationModel.load(path)


@pytest.mark.parametrize(
    ("columns", "params", "said"),
    [
        (["pixels", "label"], {}, r"NetworkClassifier\(featuresCol='features'\): the DataFrame has no column"),
        # each remedy trains: the fast default runs the first, `-m slow` (CI) the rest
        pytest.param(
            ["features", "digit"],
            {},
            r"NetworkClassifier\(labelCol='label'\): the DataFrame has no column 'label'",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            ["features", "label", "name"],
            {"labelCol": "name"},
            r"labelCol='name'\): column 'name' holds string",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            ["label", "features"],
            {"featuresCol": "label", "labelCol": "features"},
            r"column 'label' holds double",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_wrong_columns_are_refused_at_fit_naming_them_and_the_printed_remedy_runs(spark, digits, columns, params, said):
    df, _, _ = digits
    source = {"pixels": "features", "digit": "label"}
    frame = df.select(*[df[source.get(c, c)].alias(c) for c in columns])
    clf = NetworkClassifier(_net(), masterOptions=OPTIONS, **params)
    with pytest.raises(ValueError, match=said) as raised:
        clf.fit(frame)
    message = str(raised.value)
    assert all(repr(c) in message for c in columns)  # every column of the DataFrame named
    remedy = re.search(r"clf\.setFeaturesCol\('(\w+)'\)\.setLabelCol\('(\w+)'\)", message)
    assert remedy, message
    model = clf.setFeaturesCol(remedy.group(1)).setLabelCol(remedy.group(2)).fit(frame)  # as printed
    assert model.numClasses == 10


def test_a_wrong_features_column_at_transform_is_refused_and_the_printed_remedy_runs(digits, fitted):
    df, _, _ = digits
    frame = df.withColumnRenamed("features", "pixels")
    model = fitted.copy()
    with pytest.raises(ValueError, match=r"featuresCol='features'\): no such column; .*'pixels' \(vector\)") as raised:
        model.transform(frame)
    (column,) = re.findall(r"model\.setFeaturesCol\('(\w+)'\)", str(raised.value))
    assert "prediction" in model.setFeaturesCol(column).transform(frame).columns


def test_an_output_column_that_exists_is_refused_and_the_printed_remedy_runs(digits, fitted):
    df = fitted.transform(digits[0])
    with pytest.raises(
        ValueError, match=r"output column\(s\) 'rawPrediction', 'probability', 'prediction' already"
    ) as e:
        fitted.transform(df)
    (remedy,) = re.findall(r"df\.drop\([^)]*\)", str(e.value))
    again = fitted.transform(eval(remedy, {"df": df}))  # the remedy as printed
    assert again.columns == df.columns


@pytest.mark.parametrize(
    ("params", "error", "said"),
    [
        ({"epochs": 0}, ValueError, r"NetworkClassifier\(epochs=0\): must be an integer >= 1"),
        ({"batchSize": -1}, ValueError, r"NetworkClassifier\(batchSize=-1\): must be an integer >= 1"),
        ({"seed": -3}, ValueError, r"NetworkClassifier\(seed=-3\)"),
        ({"trainingMaster": "Averaging"}, ValueError, r"trainingMaster='Averaging'\): one of"),
        ({"masterOptions": {"batch_size_per_worker": 0}}, ValueError, r"batch_size_per_worker=0\): must be"),
        ({"masterOptions": [1]}, TypeError, r"masterOptions=\[1\]\): the master's keyword arguments"),
        ({"epochs": 2.0}, ValueError, r"NetworkClassifier\(epochs=2.0\): must be an integer >= 1"),  # was 2
        ({"epochs": 1e300}, ValueError, r"NetworkClassifier\(epochs=1e\+300\): must be an integer >= 1"),
        ({"batchSize": True}, ValueError, r"NetworkClassifier\(batchSize=True\)"),
        ({"seed": 2.5}, ValueError, r"NetworkClassifier\(seed=2.5\)"),
        ({"masterOptions": "{batch"}, ValueError, r"masterOptions='\{batch'\): not JSON"),
    ],
)
def test_bad_params_are_refused_when_set(params, error, said):
    with pytest.raises(error, match=said):
        NetworkClassifier(_net(), **params)


def test_a_network_that_does_not_classify_is_refused():
    from kit.nn import MSE, Dense, Network

    regression = Network([Dense(1)], input_shape=(3,), loss=MSE())
    with pytest.raises(ValueError, match=r"loss is MSE; a classifier needs softmax cross-entropy"):
        NetworkClassifier(regression)


def test_no_network_configuration_says_how_to_give_one(digits):
    df, _, _ = digits
    with pytest.raises(ValueError, match=r"no network configuration") as raised:
        NetworkClassifier().fit(df)
    (remedy,) = re.findall(r"NetworkClassifier\(network=kit\.nn\.mlp\(784, n_out=10\)\)", str(raised.value))
    import kit.nn

    assert isinstance(eval(remedy, {"kit": kit, "NetworkClassifier": NetworkClassifier}), NetworkClassifier)


def test_numpy_numbers_are_params_and_master_options():
    clf = NetworkClassifier(
        _net(), epochs=np.int64(2), seed=np.int64(3), masterOptions={"batch_size_per_worker": np.int64(8)}
    )
    assert (clf.getOrDefault("epochs"), clf.getOrDefault("seed")) == (2, 3)
    assert json.loads(clf.getOrDefault("masterOptions")) == {"batch_size_per_worker": 8}
