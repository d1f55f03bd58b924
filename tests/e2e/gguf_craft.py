"""A minimal GGUF v3 reader and writer for crafting hostile model files: it
keeps each metadata value's exact type, and writes any type, count or value
(NaN, wrong types, huge arrays) that a well-behaved writer would refuse.
Tensor infos and data are copied byte for byte."""

import struct

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
FORMAT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q", I64: "<q",
          F64: "<d"}
INTEGER_TYPES = {U8, I8, U16, I16, U32, I32, U64, I64}
FLOAT_TYPES = {F32, F64}


class Field:
    def __init__(self, type_, value, element_type=None):
        self.type, self.value, self.element_type = type_, value, element_type

    def __repr__(self):
        return f"Field({self.type}, {str(self.value)[:40]}, {self.element_type})"


class Model:
    """fields: dict key -> Field (in file order); tensor_infos: raw bytes of each
    tensor info; data: the aligned data section."""

    def __init__(self, fields, tensor_infos, data, alignment):
        self.fields, self.tensor_infos, self.data, self.alignment = fields, tensor_infos, data, alignment

    def copy(self):
        return Model(dict(self.fields), list(self.tensor_infos), self.data, self.alignment)


def _read(buf, offset, fmt):
    return struct.unpack_from(fmt, buf, offset)[0], offset + struct.calcsize(fmt)


def _read_string(buf, offset):
    n, offset = _read(buf, offset, "<Q")
    return bytes(buf[offset:offset + n]).decode("utf-8", "surrogateescape"), offset + n


def _read_value(buf, offset, type_):
    if type_ == STRING:
        return _read_string(buf, offset)
    if type_ == ARRAY:
        element_type, offset = _read(buf, offset, "<I")
        n, offset = _read(buf, offset, "<Q")
        items = []
        for _ in range(n):
            item, offset = _read_value(buf, offset, element_type)
            items.append(item)
        return (element_type, items), offset
    return _read(buf, offset, FORMAT[type_])


def read(path):
    buf = open(path, "rb").read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<IIQQ", buf, 0)
    assert magic == 0x46554747 and version == 3, path
    offset = 24
    fields = {}
    for _ in range(n_kv):
        key, offset = _read_string(buf, offset)
        type_, offset = _read(buf, offset, "<I")
        value, offset = _read_value(buf, offset, type_)
        fields[key] = Field(ARRAY, value[1], value[0]) if type_ == ARRAY else Field(type_, value)
    alignment = fields["general.alignment"].value if "general.alignment" in fields else 32
    infos = []
    for _ in range(n_tensors):
        start = offset
        _, offset = _read_string(buf, offset)
        n_dims, offset = _read(buf, offset, "<I")
        offset += 8 * n_dims + 4 + 8
        infos.append(buf[start:offset])
    data_start = (offset + alignment - 1) // alignment * alignment
    return Model(fields, infos, buf[data_start:], alignment)


def _encode_value(type_, value, element_type=None):
    if type_ == STRING:
        raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
        return struct.pack("<Q", len(raw)) + raw
    if type_ == ARRAY:
        return struct.pack("<IQ", element_type, len(value)) + b"".join(_encode_value(element_type, v) for v in value)
    return struct.pack(FORMAT[type_], value)


class Encoded(bytes):
    """Array elements already encoded, with their count (strings vary in size)."""

    def __new__(cls, raw, count):
        obj = super().__new__(cls, raw)
        obj.count = count
        return obj


def _encode_field(key, field):
    out = _encode_value(STRING, key) + struct.pack("<I", field.type)
    if field.type == ARRAY and isinstance(field.value, Encoded):
        return out + struct.pack("<IQ", field.element_type, field.value.count) + bytes(field.value)
    return out + _encode_value(field.type, field.value, field.element_type)


def write(model, path):
    head = struct.pack("<IIQQ", 0x46554747, 3, len(model.tensor_infos), len(model.fields))
    body = b"".join(_encode_field(k, f) for k, f in model.fields.items()) + b"".join(model.tensor_infos)
    size = len(head) + len(body)
    pad = (size + model.alignment - 1) // model.alignment * model.alignment - size
    with open(path, "wb") as f:
        f.write(head)
        f.write(body)
        f.write(b"\0" * pad)
        f.write(model.data)
    return path


def encoded_strings(strings):
    raw = b"".join(struct.pack("<Q", len(s)) + s for s in strings)
    return Encoded(raw, len(strings))


def encoded_numbers(fmt, count, value=0):
    return Encoded(struct.pack(fmt, value) * count, count)
