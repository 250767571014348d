"""Serializes fixes with Confluent's own serializers, registering their schema with a Schema
Registry: an encoder independent of the relay, for its tests.

Reads one fix per line on stdin (JSON: vehicle_id, lat, lng, recorded_at_ms, speed_mps, heading)
and writes, per fix, the serialized record value as base64 on stdout.

usage: serialize.py REGISTRY_URL TOPIC avro|jsonschema|protobuf
"""
import base64
import json
import sys

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext

AVRO_SCHEMA = json.dumps({
    "type": "record", "name": "VehicleLocation", "namespace": "com.example.fleet",
    "fields": [
        {"name": "vehicle_id", "type": "string"},
        {"name": "position", "type": {"type": "record", "name": "Position", "fields": [
            {"name": "lat", "type": "double"}, {"name": "lng", "type": "double"},
            {"name": "altitude", "type": ["null", "float"], "default": None}]}},
        {"name": "recorded_at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "received_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "speed_mps", "type": ["null", "double"], "default": None},
        {"name": "heading", "type": ["null", "int"], "default": None},
        {"name": "sensor", "type": {"type": "enum", "name": "Sensor", "symbols": ["GPS", "NETWORK", "FUSED"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attributes", "type": {"type": "map", "values": "long"}},
    ],
})

JSON_SCHEMA = json.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "VehicleLocation", "type": "object",
    "properties": {
        "vehicle_id": {"type": "string"},
        "position": {"type": "object", "properties": {"lat": {"type": "number"}, "lng": {"type": "number"}}},
        "recorded_at": {"type": "integer"}, "speed_mps": {"type": "number"}, "heading": {"type": "integer"},
    },
    "required": ["vehicle_id", "position", "recorded_at"],
})


def protobuf_class():
    """fleet.v1.VehicleLocation, the second message of fleet/location.proto (so the framing's
    message indexes matter), importing Position from fleet/position.proto (a schema reference)
    and google.protobuf.Timestamp."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2  # noqa: F401
    F = descriptor_pb2.FieldDescriptorProto
    pool = descriptor_pool.Default()
    position = descriptor_pb2.FileDescriptorProto(name="fleet/position.proto", package="fleet.common", syntax="proto3")
    message = position.message_type.add(name="Position")
    message.field.add(name="lat", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    message.field.add(name="lng", number=2, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    message.field.add(name="altitude", number=3, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)
    pool.Add(position)
    location = descriptor_pb2.FileDescriptorProto(
        name="fleet/location.proto", package="fleet.v1", syntax="proto3",
        dependency=["fleet/position.proto", "google/protobuf/timestamp.proto"])
    heartbeat = location.message_type.add(name="Heartbeat")
    heartbeat.field.add(name="vehicle_id", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    vehicle = location.message_type.add(name="VehicleLocation")
    sensor = vehicle.enum_type.add(name="Sensor")
    for name, number in [("SENSOR_UNSPECIFIED", 0), ("GPS", 1), ("NETWORK", 2)]:
        sensor.value.add(name=name, number=number)
    entry = vehicle.nested_type.add(name="AttributesEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    vehicle.field.add(name="vehicle_id", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    vehicle.field.add(name="position", number=2, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, type_name=".fleet.common.Position")
    vehicle.field.add(name="recorded_at", number=3, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, type_name=".google.protobuf.Timestamp")
    vehicle.field.add(name="speed_mps", number=4, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    vehicle.field.add(name="heading", number=5, type=F.TYPE_SINT32, label=F.LABEL_OPTIONAL)
    vehicle.field.add(name="sensor", number=6, type=F.TYPE_ENUM, label=F.LABEL_OPTIONAL, type_name=".fleet.v1.VehicleLocation.Sensor")
    vehicle.field.add(name="tags", number=7, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    vehicle.field.add(name="attributes", number=8, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".fleet.v1.VehicleLocation.AttributesEntry")
    vehicle.field.add(name="samples", number=9, type=F.TYPE_INT64, label=F.LABEL_REPEATED)
    pool.Add(location)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("fleet.v1.VehicleLocation"))


def protobuf_value(cls, fix):
    message = cls()
    message.vehicle_id = fix["vehicle_id"]
    message.position.lat = fix["lat"]
    message.position.lng = fix["lng"]
    message.position.altitude = 12.5
    millis = fix["recorded_at_ms"]
    message.recorded_at.seconds = millis // 1000
    message.recorded_at.nanos = (millis % 1000) * 1_000_000 + 456_789
    message.speed_mps = fix["speed_mps"]
    message.heading = fix["heading"]
    message.sensor = 1  # GPS
    message.tags.extend(["test", "protobuf"])
    message.attributes["odometer"] = 123456
    message.samples.extend([1, -2, 300])
    return message


def avro_value(fix):
    return {
        "vehicle_id": fix["vehicle_id"],
        "position": {"lat": fix["lat"], "lng": fix["lng"], "altitude": 12.5},
        "recorded_at": fix["recorded_at_ms"] * 1000 + 789,
        "received_at": fix["recorded_at_ms"] + 250,
        "speed_mps": fix["speed_mps"],
        "heading": fix["heading"],
        "sensor": "GPS",
        "tags": ["test", "avro"],
        "attributes": {"odometer": 123456},
    }


def json_value(fix):
    return {
        "vehicle_id": fix["vehicle_id"], "position": {"lat": fix["lat"], "lng": fix["lng"]},
        "recorded_at": fix["recorded_at_ms"] * 1000 + 789, "speed_mps": fix["speed_mps"], "heading": fix["heading"],
    }


def main():
    url, topic, kind = sys.argv[1], sys.argv[2], sys.argv[3]
    registry = SchemaRegistryClient({"url": url})
    if kind == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer
        serializer = AvroSerializer(registry, AVRO_SCHEMA, lambda fix, ctx: avro_value(fix))
    elif kind == "protobuf":
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
        cls = protobuf_class()
        protobuf = ProtobufSerializer(cls, registry, {"use.deprecated.format": False})
        serializer = lambda fix, ctx: protobuf(protobuf_value(cls, fix), ctx)  # noqa: E731
    elif kind == "jsonschema":
        from confluent_kafka.schema_registry.json_schema import JSONSerializer
        serializer = JSONSerializer(JSON_SCHEMA, registry, lambda fix, ctx: json_value(fix))
    else:
        sys.exit("unknown kind " + kind)
    context = SerializationContext(topic, MessageField.VALUE)
    for line in sys.stdin:
        if line.strip():
            value = serializer(json.loads(line), context)
            print(base64.b64encode(value).decode("ascii"))


if __name__ == "__main__":
    main()
