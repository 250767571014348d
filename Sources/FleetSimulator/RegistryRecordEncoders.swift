import Foundation

/// Writes simulated fixes as records.
public protocol SimulatedRecordEncoder: Sendable {
    func record(of fix: SimulatedFix) -> (key: [UInt8], value: [UInt8])
}

extension SimulatedRecordFormat: SimulatedRecordEncoder {}

/// The Confluent wire format's prefix: magic byte 0 and the schema id, big-endian.
private func framing(_ schemaId: Int32) -> [UInt8] {
    let id = UInt32(bitPattern: schemaId)
    return [0, UInt8(id >> 24), UInt8(id >> 16 & 0xFF), UInt8(id >> 8 & 0xFF), UInt8(id & 0xFF)]
}

/// Avro records of `AvroFixEncoder.schema` (the native event's fields, `recorded_at` as
/// `timestamp-millis`), framed for the Schema Registry under `schemaId`.
public struct AvroFixEncoder: SimulatedRecordEncoder {
    public static let schema = """
        {"type":"record","name":"VehicleLocation","namespace":"fleet.relay.simulated","fields":[
        {"name":"vehicle_id","type":"string"},{"name":"lat","type":"double"},{"name":"lng","type":"double"},
        {"name":"recorded_at","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"heading","type":["null","double"],"default":null},{"name":"speed_mps","type":["null","double"],"default":null},
        {"name":"accuracy_m","type":["null","double"],"default":null}]}
        """

    public let schemaId: Int32

    public init(schemaId: Int32) {
        self.schemaId = schemaId
    }

    public func record(of fix: SimulatedFix) -> (key: [UInt8], value: [UInt8]) {
        var value = framing(schemaId)
        Self.string(fix.vehicleId, into: &value)
        Self.double(fix.latitude, into: &value)
        Self.double(fix.longitude, into: &value)
        Self.long(fix.recordedAtMilliseconds, into: &value)
        for optional in [fix.heading, fix.speedMetersPerSecond, fix.accuracyMeters] {
            Self.long(1, into: &value)  // the union's second branch, double
            Self.double(optional, into: &value)
        }
        return (Array(fix.vehicleId.utf8), value)
    }

    private static func long(_ value: Int64, into bytes: inout [UInt8]) {
        var zigzag = UInt64(bitPattern: (value << 1) ^ (value >> 63))
        while zigzag >= 0x80 {
            bytes.append(UInt8(zigzag & 0x7F) | 0x80)
            zigzag >>= 7
        }
        bytes.append(UInt8(zigzag))
    }

    private static func double(_ value: Double, into bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.bitPattern.littleEndian) { bytes.append(contentsOf: $0) }
    }

    private static func string(_ value: String, into bytes: inout [UInt8]) {
        long(Int64(value.utf8.count), into: &bytes)
        bytes.append(contentsOf: value.utf8)
    }
}

/// Protobuf messages of `ProtobufFixEncoder.fileDescriptor` (proto3 `fleet.relay.simulated.
/// VehicleLocation` with the native event's fields, `recorded_at` as epoch milliseconds),
/// framed for the Schema Registry under `schemaId` with message index 0.
public struct ProtobufFixEncoder: SimulatedRecordEncoder {
    public let schemaId: Int32

    public init(schemaId: Int32) {
        self.schemaId = schemaId
    }

    /// The serialized `FileDescriptorProto`, the registry's serialized format.
    public static let fileDescriptor: [UInt8] = {
        var message = ProtobufWriter()
        message.bytes(1, Array("VehicleLocation".utf8))
        for (name, number, type) in [("vehicle_id", 1, 9), ("lat", 2, 1), ("lng", 3, 1), ("recorded_at", 4, 3),
                                     ("heading", 5, 1), ("speed_mps", 6, 1), ("accuracy_m", 7, 1)] {
            var field = ProtobufWriter()
            field.bytes(1, Array(name.utf8))
            field.varint(3, UInt64(number))
            field.varint(4, 1)  // LABEL_OPTIONAL
            field.varint(5, UInt64(type))
            message.bytes(2, field.output)
        }
        var file = ProtobufWriter()
        file.bytes(1, Array("fleet/relay/simulated.proto".utf8))
        file.bytes(2, Array("fleet.relay.simulated".utf8))
        file.bytes(4, message.output)
        file.bytes(12, Array("proto3".utf8))
        return file.output
    }()

    public func record(of fix: SimulatedFix) -> (key: [UInt8], value: [UInt8]) {
        var message = ProtobufWriter()
        message.bytes(1, Array(fix.vehicleId.utf8))
        message.double(2, fix.latitude)
        message.double(3, fix.longitude)
        message.varint(4, UInt64(bitPattern: fix.recordedAtMilliseconds))
        message.double(5, fix.heading)
        message.double(6, fix.speedMetersPerSecond)
        message.double(7, fix.accuracyMeters)
        return (Array(fix.vehicleId.utf8), framing(schemaId) + [0] + message.output)
    }
}

/// Protobuf's wire format, as much as the simulator writes.
struct ProtobufWriter {
    private(set) var output: [UInt8] = []

    mutating func varint(_ field: Int, _ value: UInt64) {
        tag(field, wireType: 0)
        raw(value)
    }

    mutating func double(_ field: Int, _ value: Double) {
        tag(field, wireType: 1)
        withUnsafeBytes(of: value.bitPattern.littleEndian) { output.append(contentsOf: $0) }
    }

    mutating func bytes(_ field: Int, _ value: [UInt8]) {
        tag(field, wireType: 2)
        raw(UInt64(value.count))
        output.append(contentsOf: value)
    }

    private mutating func tag(_ field: Int, wireType: UInt64) {
        raw(UInt64(field) << 3 | wireType)
    }

    private mutating func raw(_ value: UInt64) {
        var rest = value
        while rest >= 0x80 {
            output.append(UInt8(rest & 0x7F) | 0x80)
            rest >>= 7
        }
        output.append(UInt8(rest))
    }
}
