"""The committed conformance corpus: named scenario traces and the generated model traces."""
