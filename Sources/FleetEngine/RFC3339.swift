/// RFC 3339 timestamps (`2026-11-22T21:00:00.123Z`, `…+02:00`) to and from
/// milliseconds since the epoch. Hand-written because it runs once per event.
public enum RFC3339 {
    /// Parses a full date-time with a mandatory offset; nil when malformed or out of range.
    public static func parseMilliseconds(_ text: String) -> Int64? {
        // Every decoded event's time passes here: a native string's bytes are read in place.
        var text = text
        return text.withUTF8 { parseMilliseconds(utf8: $0) }
    }

    /// As `parseMilliseconds(_:)`, over the text's UTF-8 in place.
    public static func parseMilliseconds(utf8 text: UnsafeBufferPointer<UInt8>) -> Int64? {
        guard text.count >= 20 else { return nil }
        // RFC 3339 permits lower-case 't' and 'z'; the upper-case forms are read alike.
        let utf8 = UpperCasedDesignators(text)
        guard let year = digits(utf8, 0, 4), utf8[4] == UInt8(ascii: "-"),
            let month = digits(utf8, 5, 2), utf8[7] == UInt8(ascii: "-"),
            let day = digits(utf8, 8, 2), utf8[10] == UInt8(ascii: "T"),
            let hour = digits(utf8, 11, 2), utf8[13] == UInt8(ascii: ":"),
            let minute = digits(utf8, 14, 2), utf8[16] == UInt8(ascii: ":"),
            let second = digits(utf8, 17, 2)
        else { return nil }
        guard (1...12).contains(month), day >= 1, day <= daysInMonth(year: year, month: month),
            hour < 24, minute < 60, second < 61
        else { return nil }
        var index = 19
        var milliseconds: Int64 = 0
        if index < utf8.count, utf8[index] == UInt8(ascii: ".") {
            index += 1
            let start = index
            var scale: Int64 = 100
            while index < utf8.count, let digit = digitValue(utf8[index]) {
                milliseconds += Int64(digit) * scale
                scale /= 10
                index += 1
            }
            guard index > start else { return nil }
        }
        guard index < utf8.count else { return nil }
        var offsetSeconds: Int64 = 0
        switch utf8[index] {
        case UInt8(ascii: "Z"):
            index += 1
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            let sign: Int64 = utf8[index] == UInt8(ascii: "-") ? -1 : 1
            guard index + 6 == utf8.count, let offsetHours = digits(utf8, index + 1, 2),
                utf8[index + 3] == UInt8(ascii: ":"), let offsetMinutes = digits(utf8, index + 4, 2),
                offsetHours < 24, offsetMinutes < 60
            else { return nil }
            offsetSeconds = sign * Int64(offsetHours * 3600 + offsetMinutes * 60)
            index += 6
        default:
            return nil
        }
        guard index == utf8.count else { return nil }
        let days = daysFromCivil(year: year, month: month, day: day)
        let seconds = days * 86400 + Int64(hour * 3600 + minute * 60 + min(second, 59)) - offsetSeconds
        return seconds * 1000 + milliseconds
    }

    /// A date and time without an offset (`2026-11-22T21:00:00.123`, or with a space for the
    /// `T`), read as if it were UTC: the caller applies the zone it is in.
    public static func parseLocalMilliseconds(_ text: String) -> Int64? {
        var utf8 = Array(text.utf8)
        guard utf8.count >= 19, utf8.count < 40 else { return nil }
        if utf8[10] == UInt8(ascii: " ") || utf8[10] == UInt8(ascii: "t") { utf8[10] = UInt8(ascii: "T") }
        // The same grammar as with an offset: borrow it with a UTC designator.
        return parseMilliseconds(String(decoding: utf8, as: UTF8.self) + "Z")
    }

    /// UTC with millisecond precision: `2026-11-22T21:00:00.123Z`.
    public static func format(milliseconds: Int64) -> String {
        guard hasFourDigitYear(milliseconds) else {
            let (year, month, day, hour, minute, second, millis) = fields(milliseconds)
            func pad(_ value: Int, _ width: Int) -> String {
                let digits = String(value)
                return String(repeating: "0", count: max(0, width - digits.count)) + digits
            }
            return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(hour, 2)):\(pad(minute, 2)):\(pad(second, 2)).\(pad(millis, 3))Z"
        }
        return String(unsafeUninitializedCapacity: fourDigitYearLength) { buffer in
            write(fourDigitYear: milliseconds, into: buffer)
            return fourDigitYearLength
        }
    }

    /// The length of a time `format` writes when `hasFourDigitYear`.
    public static let fourDigitYearLength = 24

    /// Whether the time falls in the years 0000 to 9999, as every parsed timestamp does.
    public static func hasFourDigitYear(_ milliseconds: Int64) -> Bool {
        (-62_167_219_200_000...253_402_300_799_999).contains(milliseconds)
    }

    /// Writes a time of a four-digit year digit by digit into `buffer`'s first 24 bytes, with no
    /// allocation: this runs for every fix sent.
    public static func write(fourDigitYear milliseconds: Int64, into buffer: UnsafeMutableBufferPointer<UInt8>) {
        precondition(hasFourDigitYear(milliseconds) && buffer.count >= fourDigitYearLength)
        let (year, month, day, hour, minute, second, millis) = fields(milliseconds)
        var index = 0
        func put(_ value: Int, _ width: Int, _ separator: UInt8) {
            var rest = value
            for position in stride(from: index + width - 1, through: index, by: -1) {
                buffer[position] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
            }
            buffer[index + width] = separator
            index += width + 1
        }
        put(year, 4, UInt8(ascii: "-"))
        put(month, 2, UInt8(ascii: "-"))
        put(day, 2, UInt8(ascii: "T"))
        put(hour, 2, UInt8(ascii: ":"))
        put(minute, 2, UInt8(ascii: ":"))
        put(second, 2, UInt8(ascii: "."))
        put(millis, 3, UInt8(ascii: "Z"))
    }

    private static func fields(_ milliseconds: Int64)
        -> (year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int, millis: Int) {
        let totalSeconds = milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000
        let millis = Int(milliseconds - totalSeconds * 1000)
        var days = totalSeconds / 86400
        var secondOfDay = totalSeconds % 86400
        if secondOfDay < 0 { secondOfDay += 86400; days -= 1 }
        let (year, month, day) = civilFromDays(days)
        return (year, month, day, Int(secondOfDay / 3600), Int(secondOfDay % 3600 / 60), Int(secondOfDay % 60), millis)
    }

    private static func digitValue(_ byte: UInt8) -> Int? {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) ? Int(byte - UInt8(ascii: "0")) : nil
    }

    private static func digits(_ bytes: UpperCasedDesignators, _ start: Int, _ count: Int) -> Int? {
        guard start + count <= bytes.count else { return nil }
        var value = 0
        for index in start..<start + count {
            guard let digit = digitValue(bytes[index]) else { return nil }
            value = value * 10 + digit
        }
        return value
    }

    private static func daysInMonth(year: Int, month: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Howard Hinnant's days_from_civil: days since 1970-01-01.
    static func daysFromCivil(year: Int, month: Int, day: Int) -> Int64 {
        let y = Int64(month <= 2 ? year - 1 : year)
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let m = Int64(month)
        let dayOfYear = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + Int64(day) - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146097 + dayOfEra - 719468
    }

    static func civilFromDays(_ days: Int64) -> (Int, Int, Int) {
        let z = days + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let dayOfEra = z - era * 146097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        return (Int(year), Int(month), Int(day))
    }
}

/// A timestamp's bytes with lower-case `t` and `z` read as `T` and `Z`, without a copy.
private struct UpperCasedDesignators {
    let bytes: UnsafeBufferPointer<UInt8>

    init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    var count: Int { bytes.count }

    subscript(index: Int) -> UInt8 {
        let byte = bytes[index]
        return byte == UInt8(ascii: "t") || byte == UInt8(ascii: "z") ? byte - 32 : byte
    }
}
