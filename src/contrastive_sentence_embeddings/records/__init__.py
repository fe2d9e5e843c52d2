"""Records of results: the provenance every number carries (code, data, machine,
library versions), the results of record's timings, ranking of DVC experiments, and the
offline plots page. Imports only ``runs`` and ``configuration``."""
