import FleetModel
import NIOCore

/// An update request (`UpdateVehicleRequest`, `UpdateDeliveryVehicleRequest`) in protobuf's wire
/// format, written straight into its gRPC frame: the same bytes swift-protobuf writes for the
/// messages `GRPCRequest` would build (fields in number order, proto3 defaults left out), without
/// building them. Building and serializing those messages, each location a storage class and
/// every message measured before it is written, took 13.5 % of the relay's CPU in a gRPC backlog
/// drain; a drained request carries up to a hundred locations.
enum GRPCUpdateEncoding {
    /// Where a kind's request puts the vehicle's name and fixes.
    private struct Layout {
        /// The request's `name` (vehicles) or nil (delivery vehicles name the vehicle message).
        let requestName: Int?
        let vehicle: Int
        let updateMask: Int
        /// The vehicle message's `name`, for delivery vehicles.
        let vehicleName: Int?
        let lastLocation: Int
        let pastLocations: Int

        static let vehicle = Layout(requestName: 3, vehicle: 4, updateMask: 5, vehicleName: nil, lastLocation: 5, pastLocations: 30)
        static let deliveryVehicle = Layout(requestName: nil, vehicle: 3, updateMask: 4, vehicleName: 1, lastLocation: 2, pastLocations: 12)
    }

    /// `VehicleLocation` and `DeliveryVehicleLocation` share these numbers.
    private enum LocationField {
        static let location = 1, heading = 2, updateTime = 4, altitude = 5, speed = 6, locationSensor = 11
        static let supplementalLocation = 18, supplementalLocationTime = 19, supplementalLocationSensor = 20
        static let supplementalLocationAccuracy = 21, latlngAccuracy = 22
    }

    private static let lastLocationOnly = ["last_location"]
    private static let withPastLocations = ["last_location", "past_locations"]

    static func framedRequest(name: String, update: VehicleLocationUpdate, mode: LocationMode) -> ByteBuffer {
        let layout = update.vehicle.kind == .vehicle ? Layout.vehicle : Layout.deliveryVehicle
        let maskPaths = update.pastLocations.isEmpty ? lastLocationOnly : withPastLocations
        let lastSize = locationSize(update.lastLocation, mode)
        let pastSizes = update.pastLocations.map { locationSize($0, mode) }
        var vehicleSize = ProtoWriter.fieldSize(layout.lastLocation, length: lastSize)
        for size in pastSizes { vehicleSize += ProtoWriter.fieldSize(layout.pastLocations, length: size) }
        if let field = layout.vehicleName { vehicleSize += ProtoWriter.fieldSize(field, length: name.utf8.count) }
        let maskSize = maskPaths.reduce(0) { $0 + ProtoWriter.fieldSize(1, length: $1.utf8.count) }
        var messageSize = ProtoWriter.fieldSize(layout.vehicle, length: vehicleSize) + ProtoWriter.fieldSize(layout.updateMask, length: maskSize)
        if let field = layout.requestName { messageSize += ProtoWriter.fieldSize(field, length: name.utf8.count) }

        var buffer = ByteBuffer()
        // Every size is known: the frame is written in one pass over memory reserved for it.
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: 5 + messageSize) { memory in
            var writer = ProtoWriter(memory)
            writer.byte(0)  // gRPC's frame: not compressed, then the length big-endian
            for shift in [24, 16, 8, 0] as [UInt32] { writer.byte(UInt8(truncatingIfNeeded: UInt32(messageSize) >> shift)) }
            if let field = layout.requestName { writer.string(field, name) }
            writer.header(layout.vehicle, length: vehicleSize)
            if let field = layout.vehicleName { writer.string(field, name) }
            writer.header(layout.lastLocation, length: lastSize)
            writeLocation(update.lastLocation, mode, into: &writer)
            for (fix, size) in zip(update.pastLocations, pastSizes) {
                writer.header(layout.pastLocations, length: size)
                writeLocation(fix, mode, into: &writer)
            }
            writer.header(layout.updateMask, length: maskSize)
            for path in maskPaths { writer.string(1, path) }
            precondition(writer.written == 5 + messageSize, "an update's protobuf was measured wrong")
            return writer.written
        }
        return buffer
    }

    // MARK: A location

    private static func locationSize(_ fix: LocationFix, _ mode: LocationMode) -> Int {
        var size = 0
        switch mode {
        case .supplemental:
            size += ProtoWriter.fieldSize(LocationField.supplementalLocation, length: latLngSize(fix))
            size += ProtoWriter.fieldSize(LocationField.supplementalLocationTime, length: timestampSize(fix.recordedAtMilliseconds))
            size += ProtoWriter.enumSize(LocationField.supplementalLocationSensor, (fix.sensor ?? .customerSupplied).fleetEngineNumber)
            if let accuracy = fix.accuracyMeters { size += ProtoWriter.fieldSize(LocationField.supplementalLocationAccuracy, length: doubleValueSize(accuracy)) }
        case .device:
            size += ProtoWriter.fieldSize(LocationField.location, length: latLngSize(fix))
            size += ProtoWriter.fieldSize(LocationField.updateTime, length: timestampSize(fix.recordedAtMilliseconds))
            if let sensor = fix.sensor { size += ProtoWriter.enumSize(LocationField.locationSensor, sensor.fleetEngineNumber) }
            if let accuracy = fix.accuracyMeters { size += ProtoWriter.fieldSize(LocationField.latlngAccuracy, length: doubleValueSize(accuracy)) }
        }
        if let heading = fix.heading { size += ProtoWriter.fieldSize(LocationField.heading, length: int32ValueSize(Int32(clamping: heading))) }
        if let altitude = fix.altitudeMeters { size += ProtoWriter.fieldSize(LocationField.altitude, length: doubleValueSize(altitude)) }
        if let speed = fix.speedMetersPerSecond { size += ProtoWriter.fieldSize(LocationField.speed, length: doubleValueSize(speed)) }
        return size
    }

    /// The fields in number order, as `locationSize` counts them.
    private static func writeLocation(_ fix: LocationFix, _ mode: LocationMode, into writer: inout ProtoWriter) {
        if mode == .device { writeLatLng(LocationField.location, fix, into: &writer) }
        if let heading = fix.heading {
            let value = Int32(clamping: heading)
            writer.header(LocationField.heading, length: int32ValueSize(value))
            writer.varintField(1, UInt64(bitPattern: Int64(value)))
        }
        if mode == .device { writeTimestamp(LocationField.updateTime, fix.recordedAtMilliseconds, into: &writer) }
        if let altitude = fix.altitudeMeters { writeDoubleValue(LocationField.altitude, altitude, into: &writer) }
        if let speed = fix.speedMetersPerSecond { writeDoubleValue(LocationField.speed, speed, into: &writer) }
        switch mode {
        case .device:
            if let sensor = fix.sensor { writer.enumField(LocationField.locationSensor, sensor.fleetEngineNumber) }
            if let accuracy = fix.accuracyMeters { writeDoubleValue(LocationField.latlngAccuracy, accuracy, into: &writer) }
        case .supplemental:
            writeLatLng(LocationField.supplementalLocation, fix, into: &writer)
            writeTimestamp(LocationField.supplementalLocationTime, fix.recordedAtMilliseconds, into: &writer)
            writer.enumField(LocationField.supplementalLocationSensor, (fix.sensor ?? .customerSupplied).fleetEngineNumber)
            if let accuracy = fix.accuracyMeters { writeDoubleValue(LocationField.supplementalLocationAccuracy, accuracy, into: &writer) }
        }
    }

    // MARK: Well-known messages (a double is left out when its bits are zero, an integer when zero)

    private static func latLngSize(_ fix: LocationFix) -> Int {
        (fix.latitude.bitPattern != 0 ? 9 : 0) + (fix.longitude.bitPattern != 0 ? 9 : 0)
    }

    private static func writeLatLng(_ field: Int, _ fix: LocationFix, into writer: inout ProtoWriter) {
        writer.header(field, length: latLngSize(fix))
        writer.doubleField(1, fix.latitude)
        writer.doubleField(2, fix.longitude)
    }

    private static func timestampParts(_ milliseconds: Int64) -> (seconds: Int64, nanos: Int32) {
        let (seconds, remainder) = milliseconds.quotientAndRemainder(dividingBy: 1000)
        let borrow: Int64 = remainder < 0 ? 1 : 0
        return (seconds - borrow, Int32((remainder + borrow * 1000) * 1_000_000))
    }

    private static func timestampSize(_ milliseconds: Int64) -> Int {
        let (seconds, nanos) = timestampParts(milliseconds)
        return ProtoWriter.varintFieldSize(1, UInt64(bitPattern: seconds)) + ProtoWriter.varintFieldSize(2, UInt64(bitPattern: Int64(nanos)))
    }

    private static func writeTimestamp(_ field: Int, _ milliseconds: Int64, into writer: inout ProtoWriter) {
        let (seconds, nanos) = timestampParts(milliseconds)
        writer.header(field, length: timestampSize(milliseconds))
        writer.varintField(1, UInt64(bitPattern: seconds))
        writer.varintField(2, UInt64(bitPattern: Int64(nanos)))
    }

    private static func doubleValueSize(_ value: Double) -> Int { value.bitPattern != 0 ? 9 : 0 }

    private static func writeDoubleValue(_ field: Int, _ value: Double, into writer: inout ProtoWriter) {
        writer.header(field, length: doubleValueSize(value))
        writer.doubleField(1, value)
    }

    private static func int32ValueSize(_ value: Int32) -> Int {
        ProtoWriter.varintFieldSize(1, UInt64(bitPattern: Int64(value)))
    }
}

/// Protobuf's wire format into memory sized for it beforehand: tags, varints, little-endian
/// doubles and lengths.
private struct ProtoWriter {
    private let memory: UnsafeMutableRawBufferPointer
    private(set) var written = 0

    init(_ memory: UnsafeMutableRawBufferPointer) {
        self.memory = memory
    }

    /// Bounds are checked in release builds too: a size measured wrong must stop here, not write on.
    mutating func byte(_ value: UInt8) {
        precondition(written < memory.count, "an update's protobuf was measured wrong")
        memory[written] = value
        written += 1
    }

    static func varintSize(_ value: UInt64) -> Int { value == 0 ? 1 : (64 - value.leadingZeroBitCount + 6) / 7 }

    /// A length-delimited field: its tag, its length and the bytes.
    static func fieldSize(_ field: Int, length: Int) -> Int {
        varintSize(UInt64(field << 3)) + varintSize(UInt64(length)) + length
    }

    /// A varint field, left out when zero.
    static func varintFieldSize(_ field: Int, _ value: UInt64) -> Int {
        value == 0 ? 0 : varintSize(UInt64(field << 3)) + varintSize(value)
    }

    static func enumSize(_ field: Int, _ number: Int) -> Int { varintFieldSize(field, UInt64(number)) }

    mutating func varint(_ value: UInt64) {
        var rest = value
        while rest >= 0x80 {
            byte(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        byte(UInt8(rest))
    }

    /// The tag and length of a length-delimited field; its bytes follow.
    mutating func header(_ field: Int, length: Int) {
        varint(UInt64(field << 3 | 2))
        varint(UInt64(length))
    }

    /// A varint field, left out when zero, as `varintFieldSize` counts it.
    mutating func varintField(_ field: Int, _ value: UInt64) {
        guard value != 0 else { return }
        varint(UInt64(field << 3))
        varint(value)
    }

    mutating func enumField(_ field: Int, _ number: Int) { varintField(field, UInt64(number)) }

    mutating func doubleField(_ field: Int, _ value: Double) {
        guard value.bitPattern != 0 else { return }
        varint(UInt64(field << 3 | 1))
        precondition(written + 8 <= memory.count, "an update's protobuf was measured wrong")
        memory.storeBytes(of: value.bitPattern.littleEndian, toByteOffset: written, as: UInt64.self)
        written += 8
    }

    mutating func string(_ field: Int, _ text: String) {
        guard !text.isEmpty else { return }
        header(field, length: text.utf8.count)
        for byte in text.utf8 { self.byte(byte) }
    }
}
