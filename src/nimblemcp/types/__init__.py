"""Protocol vocabulary: versions, `_meta` keys, HTTP header names, the method table.

One type set serves every protocol revision: newer fields are optional and unknown
fields are tolerated. Knows nothing of servers, clients or I/O.
"""

from nimblemcp.types._http import (
    ACCEPT_BOTH,
    HEADER_METHOD,
    HEADER_NAME,
    HEADER_PROTOCOL_VERSION,
    HEADER_SESSION_ID,
    JSON_TYPE,
    PARAM_HEADER_PREFIX,
    SSE_TYPE,
)
from nimblemcp.types._meta import (
    CLIENT_CAPABILITIES,
    CLIENT_INFO,
    LOG_LEVEL,
    LOG_LEVELS,
    PROGRESS_TOKEN,
    PROTOCOL_VERSION,
    SERVER_INFO,
    SUBSCRIPTION_ID,
    TASKS_EXTENSION,
    RequestMeta,
    parse_request_meta,
)
from nimblemcp.types._versions import (
    LATEST_VERSION,
    LEGACY_VERSIONS,
    MODERN_VERSIONS,
    SUPPORTED_VERSIONS,
    is_modern,
    version_index,
)
from nimblemcp.types.methods import METHODS, MethodSpec

__all__ = [
    "ACCEPT_BOTH",
    "CLIENT_CAPABILITIES",
    "CLIENT_INFO",
    "HEADER_METHOD",
    "HEADER_NAME",
    "HEADER_PROTOCOL_VERSION",
    "HEADER_SESSION_ID",
    "JSON_TYPE",
    "LATEST_VERSION",
    "LEGACY_VERSIONS",
    "LOG_LEVEL",
    "LOG_LEVELS",
    "METHODS",
    "MODERN_VERSIONS",
    "PARAM_HEADER_PREFIX",
    "PROGRESS_TOKEN",
    "PROTOCOL_VERSION",
    "SERVER_INFO",
    "SSE_TYPE",
    "SUBSCRIPTION_ID",
    "SUPPORTED_VERSIONS",
    "TASKS_EXTENSION",
    "MethodSpec",
    "RequestMeta",
    "is_modern",
    "parse_request_meta",
    "version_index",
]
