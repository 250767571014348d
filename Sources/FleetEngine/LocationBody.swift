import FleetModel
import JSON
import NIOCore

/// An update's JSON body (docs/fleet-engine.md): `lastLocation` and, oldest first,
/// `pastLocations`, each a `VehicleLocation` in the fields of `LocationMode`. It is written in
/// one pass over memory reserved for its longest form, with bounds checked, instead of through
/// a general JSON writer: a drained request carries up to a hundred locations, and appending
/// to a growing array member by member cost 7 % of the relay's CPU in a backlog drain. The text
/// is what `JSONObjectWriter` writes for the same members.
enum LocationBody {
    /// More than the longest location: every field present, each number at its longest (25
    /// bytes), a time before year 0 or after 9999 (at most 34), the longest sensor name.
    private static let longestLocation = 512
    private static let envelope = 40

    /// The body in a buffer of its own, as it is sent. It is written into scratch memory and
    /// copied into a buffer of its size: a buffer of the longest form (a kilobyte and more for
    /// one location) would take a large-chunk path through the allocator on every request.
    static func buffer(of update: VehicleLocationUpdate, mode: LocationMode) -> ByteBuffer {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: envelope + longestLocation * (1 + update.pastLocations.count)) { scratch in
            let written = write(update, mode: mode, into: scratch)
            return ByteBuffer(bytes: UnsafeBufferPointer(rebasing: scratch[..<written]))
        }
    }

    /// Writes the body into `memory`, which holds its longest form; returns the bytes written.
    private static func write(_ update: VehicleLocationUpdate, mode: LocationMode, into memory: UnsafeMutableBufferPointer<UInt8>) -> Int {
        var writer = BodyWriter(memory)
        writer.raw("{\"lastLocation\":")
        writer.location(update.lastLocation, mode)
        if !update.pastLocations.isEmpty {
            writer.raw(",\"pastLocations\":[")
            for (index, fix) in update.pastLocations.enumerated() {
                if index > 0 { writer.byte(UInt8(ascii: ",")) }
                writer.location(fix, mode)
            }
            writer.byte(UInt8(ascii: "]"))
        }
        writer.byte(UInt8(ascii: "}"))
        return writer.written
    }
}

/// JSON text into memory reserved for it.
private struct BodyWriter {
    private let memory: UnsafeMutableBufferPointer<UInt8>
    private(set) var written = 0

    init(_ memory: UnsafeMutableBufferPointer<UInt8>) {
        self.memory = memory
    }

    /// Writes one `VehicleLocation` object, members in the order the contract shows them.
    mutating func location(_ fix: LocationFix, _ mode: LocationMode) {
        switch mode {
        case .supplemental:
            raw("{\"supplementalLocation\":")
            latLng(fix)
            raw(",\"supplementalLocationTime\":")
            time(fix.recordedAtMilliseconds)
            raw(",\"supplementalLocationSensor\":")
            plainString((fix.sensor ?? .customerSupplied).fleetEngineName)
            if let accuracy = fix.accuracyMeters {
                raw(",\"supplementalLocationAccuracy\":")
                number(accuracy)
            }
        case .device:
            raw("{\"location\":")
            latLng(fix)
            raw(",\"updateTime\":")
            time(fix.recordedAtMilliseconds)
            if let sensor = fix.sensor {
                raw(",\"locationSensor\":")
                plainString(sensor.fleetEngineName)
            }
            if let accuracy = fix.accuracyMeters {
                raw(",\"latlngAccuracy\":")
                number(accuracy)
            }
        }
        if let heading = fix.heading {
            raw(",\"heading\":")
            integer(Int64(heading))
        }
        if let speed = fix.speedMetersPerSecond {
            raw(",\"speed\":")
            number(speed)
        }
        if let altitude = fix.altitudeMeters {
            raw(",\"altitude\":")
            number(altitude)
        }
        byte(UInt8(ascii: "}"))
    }

    private mutating func latLng(_ fix: LocationFix) {
        raw("{\"latitude\":")
        number(fix.latitude)
        raw(",\"longitude\":")
        number(fix.longitude)
        byte(UInt8(ascii: "}"))
    }

    /// RFC 3339 in quotes; a four-digit year's time written in place.
    private mutating func time(_ milliseconds: Int64) {
        guard RFC3339.hasFourDigitYear(milliseconds) else { return plainString(RFC3339.format(milliseconds: milliseconds)) }
        byte(UInt8(ascii: "\""))
        reserve(RFC3339.fourDigitYearLength)
        RFC3339.write(fourDigitYear: milliseconds, into: UnsafeMutableBufferPointer(rebasing: memory[written...]))
        written += RFC3339.fourDigitYearLength
        byte(UInt8(ascii: "\""))
    }

    /// A string of the relay's own (a sensor's name, a time): nothing in it needs escaping.
    private mutating func plainString(_ text: String) {
        byte(UInt8(ascii: "\""))
        for byte in text.utf8 { self.byte(byte) }
        byte(UInt8(ascii: "\""))
    }

    /// As `JSONText.number` writes it: whole numbers below 10^15 as integers, others in Swift's
    /// shortest round-trip form (a device's plain decimals without searching for it).
    private mutating func number(_ value: Double) {
        precondition(value.isFinite, "JSON has no representation for \(value)")
        // Whole when truncation keeps it: two conversions, where `rounded()` calls libm's `round`.
        if abs(value) < 1e15, Double(Int64(value)) == value { return integer(Int64(value)) }
        reserve(JSONDecimal.longestText)
        if let count = JSONDecimal.write(value, into: UnsafeMutableBufferPointer(rebasing: memory[written...])) {
            written += count
            return
        }
        var output = ASCIIOutput(writer: self)
        value.write(to: &output)
        self = output.writer
    }

    private mutating func integer(_ value: Int64) {
        if value < 0 { byte(UInt8(ascii: "-")) }
        var digits = 1
        var rest = value.magnitude
        while rest >= 10 {
            digits += 1
            rest /= 10
        }
        reserve(digits)
        rest = value.magnitude
        for position in stride(from: written + digits - 1, through: written, by: -1) {
            memory[position] = UInt8(ascii: "0") + UInt8(rest % 10)
            rest /= 10
        }
        written += digits
    }

    mutating func raw(_ text: StaticString) {
        let count = text.utf8CodeUnitCount
        reserve(count)
        UnsafeMutableRawPointer(memory.baseAddress! + written).copyMemory(from: text.utf8Start, byteCount: count)
        written += count
    }

    mutating func byte(_ value: UInt8) {
        reserve(1)
        memory[written] = value
        written += 1
    }

    /// Bounds are checked in release builds too: a body longer than its reservation must stop
    /// here, not write on.
    private func reserve(_ count: Int) {
        precondition(written + count <= memory.count, "an update's body outgrew its reservation")
    }

    /// What `Double.write(to:)` writes: the standard library hands a number's digits to
    /// `_writeASCII` from a buffer on the stack; `write(_:)` serves any other text.
    private struct ASCIIOutput: TextOutputStream {
        var writer: BodyWriter

        mutating func write(_ string: String) {
            for byte in string.utf8 { writer.byte(byte) }
        }

        mutating func _writeASCII(_ buffer: UnsafeBufferPointer<UInt8>) {
            for byte in buffer { writer.byte(byte) }
        }
    }
}
