"""durably.schemas: the versioned record and snapshot schemas and their upcasters.

Upcaster authors import from here::

    from durably.schemas import RECORD_SCHEMA_ID, upcaster

``records`` holds the record kinds and wire shapes (CDDL beside it),
``upcasters`` the registry that lifts old versions on read.
"""

from ._records import CURRENT_VERSIONS, RECORD_SCHEMA_ID, SNAPSHOT_SCHEMA_ID, Kind
from ._upcasters import upcaster

__all__ = ["CURRENT_VERSIONS", "RECORD_SCHEMA_ID", "SNAPSHOT_SCHEMA_ID", "Kind", "upcaster"]
