"""kit.spark.spark_context: where Spark cannot start (no Java), the error says so in words, keeps its
remedy's command whole, and the package it names is what supplies Java here."""

import os

import pytest


def test_the_error_that_says_spark_is_missing_shows_its_words_alone_and_keeps_a_command_whole():
    from kit.spark import SparkUnavailableError

    command = "`apt-get install -y openjdk-17-jre-headless`"
    err = SparkUnavailableError("Spark needs Java 17 and finds none (no `java` on PATH): " + "x " * 30 + command)
    lines = err._render_traceback_()
    assert lines[0].startswith("SparkUnavailableError: Spark needs Java 17")
    assert any(command in line for line in lines), lines
    assert all(len(line) <= 100 for line in lines)
    assert not any("Traceback" in line or line.lstrip().startswith("File ") for line in lines)


def test_the_package_the_message_names_is_what_supplies_java_here():
    """The remedy the message prints names a real package: on this Debian machine, the `java` that
    Spark runs is that package's."""
    import shutil
    import subprocess

    java, dpkg = shutil.which("java"), shutil.which("dpkg")
    if not (java and dpkg):
        pytest.skip("needs Debian's dpkg and a java on PATH")
    owner = subprocess.run([dpkg, "-S", os.path.realpath(java)], capture_output=True, text=True, timeout=30)
    assert owner.returncode == 0, owner.stderr
    assert owner.stdout.startswith("openjdk-17-jre-headless")
