"""durably.schemas: the versioned record and snapshot schemas and their upcasters.

Upcaster authors import from here:

```python
from durably.schemas import RECORD_SCHEMA_ID, upcaster
```

``Kind`` names the record kinds, ``RECORD_SCHEMA_ID`` / ``SNAPSHOT_SCHEMA_ID``
and ``CURRENT_VERSIONS`` the schemas and the versions this build writes (the
CDDL texts ship beside this module, ``record-vN.cddl``), and ``upcaster``
registers a step that lifts an old version on read.
"""

from ._records import CURRENT_VERSIONS, RECORD_SCHEMA_ID, SNAPSHOT_SCHEMA_ID, Kind
from ._upcasters import upcaster

__all__ = ["CURRENT_VERSIONS", "RECORD_SCHEMA_ID", "SNAPSHOT_SCHEMA_ID", "Kind", "upcaster"]
