"""A kit Network as a pyspark.ml Estimator and Model (DL4J's dl4j-spark-ml SparkDl4jNetwork and
SparkDl4jModel; MLlib's MultilayerPerceptronClassifier and its model), for Pipelines and CrossValidator.

Usage (needs a SparkSession, so not a doctest; `net` as in kit.spark's example):

    clf = NetworkClassifier(network=net, epochs=2, masterOptions={"batch_size_per_worker": 32})
    model = clf.fit(train_df)                        # SparkNetwork + a training master, on the executors
    scored = model.transform(test_df)                # + rawPrediction, probability, prediction columns
    model.write().overwrite().save("model")          # MLlib's layout: metadata/ (JSON) + data/network.npz
    same = NetworkClassificationModel.load("model")

Params are MLlib's (an output column set to "" is not added) and kit's, all JSON: `networkConfig`,
`trainingMaster` with `masterOptions` (its keyword arguments), `epochs`, `batchSize`, `seed`. A bad
value is refused when set, naming the Param. The network must end in softmax cross-entropy:
`probability` is its output, `rawPrediction` its log, `prediction` the argmax as a double, as
MulticlassClassificationEvaluator reads it. transform runs on the executors (`mapInArrow`, the
parameters as one broadcast); nothing is collected to the driver. The model saves its network in
kit's model-file format (kit.nn.persistence) beside MLlib's metadata, which load() checks too.
"""

# ruff: noqa: N803, N815  (MLlib's Param names are camelCase: featuresCol, and the keyword arguments with them)
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
from pyspark.ml.base import Estimator, Model
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import (
    HasFeaturesCol,
    HasLabelCol,
    HasPredictionCol,
    HasProbabilityCol,
    HasRawPredictionCol,
)
from pyspark.ml.util import (
    DefaultParamsReadable,
    DefaultParamsReader,
    DefaultParamsWritable,
    DefaultParamsWriter,
    MLReadable,
    MLReader,
    MLWritable,
    MLWriter,
)

from kit.nn.config import NetworkConfig
from kit.nn.network import Network
from kit.nn.persistence import ModelFileError
from kit.spark.arrow_data import VECTOR_FIELDS, column_to_numpy
from kit.spark.averaging_master import ParameterAveragingTrainingMaster
from kit.spark.executor import network_for
from kit.spark.network import SparkNetwork
from kit.spark.prepared import PreparedCache
from kit.spark.rdd_data import Caller, dataframe_columns, features_ok
from kit.spark.scoring import outputs_of_rows
from kit.spark.shared_master import SharedTrainingMaster
from kit.spark.spark_evaluation import DEFAULT_EVAL_BATCH_SIZE, check_batch_size

__all__ = ["NetworkClassificationModel", "NetworkClassifier"]

MASTERS = {
    "ParameterAveragingTrainingMaster": ParameterAveragingTrainingMaster,
    "SharedTrainingMaster": SharedTrainingMaster,
}
DATA_FILE = os.path.join("data", "network.npz")
# the words a wrong column is refused in: this API's Params, and the setter calls that fix it
ESTIMATOR = Caller(
    "NetworkClassifier", ("featuresCol", "labelCol"), "clf.setFeaturesCol({features}).setLabelCol({label})"
)


def _network_config(value: Any) -> str:
    """A Network, a NetworkConfig or its JSON, as the JSON (checked: it builds, it classifies)."""
    if isinstance(value, Network):
        value = value.configuration
    text = value.to_json() if isinstance(value, NetworkConfig) else TypeConverters.toString(value)
    cfg = NetworkConfig.from_json(text)
    if cfg.loss.get("type") != "SoftmaxCrossEntropy":
        raise ValueError(
            f"NetworkClassifier(networkConfig=...): the network's loss is {cfg.loss.get('type')}; a classifier needs "
            "softmax cross-entropy (kit.nn.mlp's default) so that its output is class probabilities"
        )
    return text


def _master_options(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"NetworkClassifier(masterOptions={value!r}): not JSON ({exc}); give a dict") from None
    if not isinstance(value, dict):
        raise TypeError(f"NetworkClassifier(masterOptions={value!r}): the master's keyword arguments, a dict")
    return json.dumps(value, sort_keys=True, default=_plain)  # np.int64(32) is 32 on the wire


def _plain(value: Any) -> Any:
    if isinstance(value, np.integer | np.floating | np.bool_):
        return value.item()
    raise TypeError(f"NetworkClassifier(masterOptions=...): {value!r} is not a number, string or bool")


def _master_name(value: Any) -> str:
    if value not in MASTERS:
        raise ValueError(f"NetworkClassifier(trainingMaster={value!r}): one of {', '.join(map(repr, MASTERS))}")
    return value


def _positive(name: str) -> Any:
    def convert(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:  # 2.0 was 2, 1e300 huge
            raise ValueError(f"NetworkClassifier({name}={value!r}): must be an integer >= 1")
        return int(value)

    return convert


def _seed(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ValueError(f"NetworkClassifier(seed={value!r}): an integer >= 0 (NumPy's seeds are)")
    return int(value)


class _NetworkParams(HasFeaturesCol, HasLabelCol, HasPredictionCol, HasProbabilityCol, HasRawPredictionCol):
    """The Params NetworkClassifier and NetworkClassificationModel share."""

    networkConfig: Param[str] = Param(
        Params._dummy(), "networkConfig", "the kit Network's configuration (NetworkConfig JSON)", _network_config
    )
    trainingMaster: Param[str] = Param(
        Params._dummy(), "trainingMaster", "ParameterAveragingTrainingMaster or SharedTrainingMaster", _master_name
    )
    masterOptions: Param[str] = Param(
        Params._dummy(), "masterOptions", "the training master's keyword arguments (a JSON object)", _master_options
    )
    epochs: Param[int] = Param(Params._dummy(), "epochs", "passes over the data (>= 1)", _positive("epochs"))
    seed: Param[int] = Param(Params._dummy(), "seed", "the network's initialisation seed (>= 0)", _seed)
    batchSize: Param[int] = Param(
        Params._dummy(), "batchSize", "examples scored at a time on an executor (>= 1)", _positive("batchSize")
    )

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._setDefault(
            trainingMaster="ParameterAveragingTrainingMaster",
            masterOptions="{}",
            epochs=1,
            batchSize=DEFAULT_EVAL_BATCH_SIZE,
        )

    def setFeaturesCol(self, value: str) -> Any:
        return self._set(featuresCol=value)

    def setLabelCol(self, value: str) -> Any:
        return self._set(labelCol=value)

    def setPredictionCol(self, value: str) -> Any:
        return self._set(predictionCol=value)

    def setProbabilityCol(self, value: str) -> Any:
        return self._set(probabilityCol=value)

    def setRawPredictionCol(self, value: str) -> Any:
        return self._set(rawPredictionCol=value)

    def setEpochs(self, value: int) -> Any:
        return self._set(epochs=value)

    def setSeed(self, value: int) -> Any:
        return self._set(seed=value)

    def setBatchSize(self, value: int) -> Any:
        return self._set(batchSize=value)

    def setMasterOptions(self, value: dict[str, Any] | str) -> Any:
        return self._set(masterOptions=value)

    def _set_given(self, given: dict[str, Any]) -> None:
        """Set the Params given (None: unset), each checked by its converter."""
        self._set(**{name: value for name, value in given.items() if value is not None})

    def configuration(self) -> NetworkConfig:
        if not self.isDefined(self.networkConfig):
            raise ValueError(
                f"{type(self).__name__}: no network configuration; give one, e.g. "
                "NetworkClassifier(network=kit.nn.mlp(784, n_out=10))"
            )
        cfg = NetworkConfig.from_json(self.getOrDefault(self.networkConfig))
        return cfg.replace(seed=self.getOrDefault(self.seed)) if self.isDefined(self.seed) else cfg


class NetworkClassifier(
    _NetworkParams, Estimator["NetworkClassificationModel"], DefaultParamsReadable, DefaultParamsWritable
):
    """fit(df) trains a kit Network on Spark (SparkNetwork and a training master) and returns a
    NetworkClassificationModel."""

    def __init__(
        self,
        network: Network | NetworkConfig | str | None = None,
        *,
        featuresCol: str = "features",
        labelCol: str = "label",
        predictionCol: str = "prediction",
        probabilityCol: str = "probability",
        rawPredictionCol: str = "rawPrediction",
        trainingMaster: str | None = None,
        masterOptions: dict[str, Any] | str | None = None,
        epochs: int | None = None,
        seed: int | None = None,
        batchSize: int | None = None,
    ) -> None:
        super().__init__()
        given = {
            "networkConfig": network,
            "featuresCol": featuresCol,
            "labelCol": labelCol,
            "predictionCol": predictionCol,
            "probabilityCol": probabilityCol,
            "rawPredictionCol": rawPredictionCol,
            "trainingMaster": trainingMaster,
            "masterOptions": masterOptions,
            "epochs": epochs,
            "seed": seed,
            "batchSize": batchSize,
        }
        self._set_given(given)
        if self.isSet(self.masterOptions):
            self.make_master()  # a bad option is refused here, naming it, not at fit

    def make_master(self) -> Any:
        """The training master the Params describe (a new one per fit), holding this estimator's
        prepared data: a later fit on the same DataFrame with the same settings reuses the rounds an
        earlier one prepared (kit.spark.prepared), as a SparkNetwork's fits do."""
        options = json.loads(self.getOrDefault(self.masterOptions))
        master = MASTERS[self.getOrDefault(self.trainingMaster)](**options)
        if getattr(self, "_prepared", None) is None:  # shared by copies (CrossValidator's), as Params are
            self._prepared = PreparedCache()
        master.prepared = self._prepared
        return master

    def _fit(self, dataset: Any) -> NetworkClassificationModel:
        dataframe_columns(dataset, self.getFeaturesCol(), self.getLabelCol(), ESTIMATOR)  # in this API's words
        net = Network.from_config(self.configuration())
        spark_net = SparkNetwork(
            dataset.sparkSession.sparkContext,
            net,
            self.make_master(),
            features_col=self.getFeaturesCol(),
            label_col=self.getLabelCol(),
        )
        spark_net.fit(dataset, epochs=self.getOrDefault(self.epochs))
        model = NetworkClassificationModel(net)
        self._copyValues(model)
        model._set(networkConfig=net.configuration.to_json())
        return model


class NetworkClassificationModel(_NetworkParams, Model, MLReadable, MLWritable):
    """A trained kit Network as a Transformer: transform(df) adds rawPrediction, probability and prediction."""

    def __init__(self, network: Network | None = None) -> None:
        super().__init__()
        self.network = network
        if network is not None:
            self._set(networkConfig=network.configuration.to_json())

    @property
    def numClasses(self) -> int:
        return int(self._trained().output_shape[0])

    def _trained(self) -> Network:
        if self.network is None:
            raise ValueError("NetworkClassificationModel holds no network: make one with NetworkClassifier.fit or load")
        return self.network

    def _transform(self, dataset: Any) -> Any:
        from pyspark.ml.linalg import VectorUDT
        from pyspark.sql.types import DoubleType, StructField, StructType

        net = self._trained()
        features = self.getFeaturesCol()
        kinds = {f.name: f.dataType.simpleString() for f in dataset.schema.fields}
        listed = ", ".join(f"{c!r} ({k})" for c, k in kinds.items())
        if features not in kinds or not features_ok(kinds[features]):
            found = "no such column" if features not in kinds else f"it holds {kinds[features]}"
            fits = [c for c, k in kinds.items() if features_ok(k)]
            fix = f"model.setFeaturesCol({fits[0]!r})" if fits else "a DataFrame with a Vector or array column"
            raise ValueError(
                f"NetworkClassificationModel(featuresCol={features!r}): {found}; the DataFrame's columns are {listed}. "
                f"Name a Vector or array column: {fix}"
            )
        outputs = [
            (c, t)
            for c, t in (
                (self.getRawPredictionCol(), VectorUDT()),
                (self.getProbabilityCol(), VectorUDT()),
                (self.getPredictionCol(), DoubleType()),
            )
            if c
        ]
        taken = [c for c, _ in outputs if c in kinds]
        if taken:
            raise ValueError(
                f"NetworkClassificationModel: the DataFrame has the output column(s) {', '.join(map(repr, taken))} "
                f"already (its columns are {listed}); drop them first: df.drop({', '.join(map(repr, taken))}), or "
                "name the outputs otherwise (setPredictionCol, setProbabilityCol, setRawPredictionCol)"
            )
        check_batch_size(self.getOrDefault(self.batchSize), "transform")
        schema = StructType([*dataset.schema.fields, *(StructField(c, t, True) for c, t in outputs)])
        params = dataset.sparkSession.sparkContext.broadcast(net.params().numpy())
        task = _transform_task(net.configuration.to_json(), params, features, [c for c, _ in outputs], self)
        return dataset.mapInArrow(task, schema)

    def write(self) -> MLWriter:
        return _ModelWriter(self)

    @classmethod
    def read(cls) -> MLReader:
        return _ModelReader(cls)


def _transform_task(config_json: str, params: Any, features: str, outputs: list[str], model: Any) -> Any:
    names = (model.getRawPredictionCol(), model.getProbabilityCol(), model.getPredictionCol())
    batch_size = model.getOrDefault(model.batchSize)

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        net = network_for(config_json, None)
        net.set_params(params.value)
        for batch in batches:
            x = column_to_numpy(batch.column(features), features)
            probability = outputs_of_rows(net, x, batch_size).astype(np.float64)
            with np.errstate(divide="ignore"):
                columns = {
                    names[0]: _dense_vectors(np.log(probability)),
                    names[1]: _dense_vectors(probability),
                    names[2]: pa.array(probability.argmax(axis=1).astype(np.float64)),
                }
            arrays = [*batch.columns, *(columns[c] for c in outputs)]
            yield pa.RecordBatch.from_arrays(arrays, [*batch.schema.names, *outputs])

    return run


def _dense_vectors(rows: np.ndarray) -> Any:
    """Rows (n, C) as MLlib dense Vectors, in Arrow's form of them (struct<type, size, indices, values>)."""
    import pyarrow as pa

    n, c = rows.shape
    offsets = pa.array(np.arange(0, n * c + 1, c, dtype=np.int32))
    values = pa.ListArray.from_arrays(offsets, pa.array(rows.reshape(-1)))
    kind = pa.array(np.ones(n, np.int8))
    children = [kind, pa.nulls(n, pa.int32()), pa.nulls(n, pa.list_(pa.int32())), values]
    return pa.StructArray.from_arrays(children, names=list(VECTOR_FIELDS))


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _local(path: str) -> str:
    if "://" in path and not path.startswith("file://"):
        raise ValueError(
            f"NetworkClassificationModel: {path!r} is not on the driver's file system; kit saves models to a local "
            "path or a file:// URL"
        )
    return path.removeprefix("file://")


class _ModelWriter(MLWriter):
    """MLlib's metadata (Params as JSON) + the network in kit's model-file format, its SHA-256 in the metadata."""

    def __init__(self, instance: NetworkClassificationModel) -> None:
        super().__init__()
        self.instance = instance

    def saveImpl(self, path: str) -> None:
        target = os.path.join(_local(path), DATA_FILE)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        self.instance._trained().save(target)
        extra = {"kit": {"file": DATA_FILE, "sha256": _sha256(target)}}
        DefaultParamsWriter.saveMetadata(self.instance, path, self.sparkSession, extraMetadata=extra)


class _ModelReader(MLReader):
    def __init__(self, cls: type) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str) -> NetworkClassificationModel:
        metadata = DefaultParamsReader.loadMetadata(path, self.sparkSession)
        target = os.path.join(_local(path), metadata.get("kit", {}).get("file", DATA_FILE))
        recorded = metadata.get("kit", {}).get("sha256")
        if recorded != _sha256(target):
            raise ModelFileError(
                f"{target}: its SHA-256 differs from the one the model's metadata recorded ({recorded}); the file was "
                "changed or replaced after saving. Save the model again"
            )
        net = Network.load(target)  # kit's own checks: arrays, dtypes, shapes, configuration
        model = self.cls(net)
        model._resetUid(metadata["uid"])
        DefaultParamsReader.getAndSetParams(model, metadata)
        if NetworkConfig.from_json(model.getOrDefault(model.networkConfig)) != net.configuration:
            raise ModelFileError(f"{path}: the metadata's networkConfig is not the saved network's configuration")
        return model
