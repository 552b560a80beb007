"""The queries both SQL guards must agree on: benign ones (docs/spark.md, the tests), hostile
ones (every spelling of tests/security), and spellings generated from the allowlist's edges.

Benign queries are deterministic (no `rand`, `uuid`, `current_timestamp`...): their answers
are compared between embedded Spark and Spark Connect.
"""

from __future__ import annotations

from spark_workers import sql_allowlist
from tests.security.test_allowlist import REFUSED
from tests.security.test_resources import EXPLODING_PLANS, GENERATED_FROM_CONSTANTS
from tests.security.test_sql_guard import COMMANDS, LEAKS, REFLECTION
from tests.spark_connect.test_connect_workers import HOSTILE_SQL

BENIGN = [
    # docs/spark.md and spark_workers.demo
    "SELECT payment, count(*) AS trips, round(sum(tip), 2) AS tips FROM dataset "
    "WHERE passengers >= 2 GROUP BY payment ORDER BY trips DESC",
    "SELECT * FROM dataset ORDER BY trip_id LIMIT 100",
    # tests/spark, tests/security
    "SELECT count(*) AS n FROM dataset",
    "SELECT count(*) AS n, max(fare) AS m FROM dataset",
    "SELECT payment, count(*) AS n FROM dataset GROUP BY payment ORDER BY payment",
    "WITH t AS (SELECT city, fare FROM dataset WHERE passengers > 1) "
    "SELECT city, round(avg(fare), 2) AS f FROM t GROUP BY city ORDER BY city",
    "SELECT trip_id, fare FROM dataset ORDER BY trip_id LIMIT 50",
    "SELECT 1 AS one",
    "SELECT system.builtin.lower(city) AS l, builtin.`abs`(-fare) AS f FROM dataset "
    "ORDER BY trip_id LIMIT 3",
    "SELECT transform(sequence(1, 3), x -> x * passengers) AS t, "
    "aggregate(array(1, 2), 0, (acc, x) -> acc + x) AS s FROM dataset ORDER BY trip_id LIMIT 3",
    "SELECT city, x FROM dataset LATERAL VIEW explode(array(1, 2)) t AS x "
    "ORDER BY trip_id, x LIMIT 3",
    "WITH t AS (SELECT city, fare FROM dataset) SELECT * FROM t PIVOT "
    "(round(avg(fare), 2) FOR city IN ('Paris' AS paris, 'Lyon' AS lyon))",
    "SELECT lpad(cast(passengers AS string), 3, '0') AS p, repeat('*', 3) AS bar, "
    "date_format(pickup_time, 'yyyy-MM') AS month FROM dataset ORDER BY trip_id LIMIT 3",
    "SELECT * FROM VALUES (1, 'a'), (2, 'b') AS v(n, s) ORDER BY n",
    "SELECT /*+ BROADCAST(b) */ count(*) AS n FROM dataset a JOIN dataset b USING (trip_id)",
    "SELECT x, lpad(cast(x AS string), 4, '0') AS padded, repeat('*', 3) AS bar "
    "FROM (SELECT explode(sequence(1, 100)) AS x) ORDER BY x",
    # filters, predicates, expressions
    "SELECT trip_id FROM dataset WHERE fare > 30 AND city IN ('Paris', 'Lyon') ORDER BY trip_id",
    "SELECT trip_id FROM dataset WHERE fare BETWEEN 10 AND 20 ORDER BY trip_id LIMIT 20",
    "SELECT trip_id FROM dataset WHERE city LIKE 'P%' AND NOT passengers = 1 ORDER BY 1",
    "SELECT trip_id FROM dataset WHERE city ILIKE 'p%' OR payment RLIKE '^ca' ORDER BY 1",
    "SELECT trip_id FROM dataset WHERE tip IS NOT NULL AND payment <=> 'card' ORDER BY 1",
    "SELECT trip_id FROM dataset WHERE passengers % 2 = 0 AND passengers != 4 ORDER BY 1",
    "SELECT trip_id, CASE WHEN fare > 50 THEN 'high' WHEN fare > 20 THEN 'mid' ELSE 'low' END "
    "AS band FROM dataset ORDER BY trip_id LIMIT 30",
    "SELECT trip_id, if(tip > 4, 'good', 'meh') AS t, coalesce(NULL, city) AS c, "
    "nvl(NULL, 1) AS o FROM dataset ORDER BY trip_id LIMIT 10",
    "SELECT trip_id, fare * 2 + 1 AS a, fare / 3 AS b, passengers DIV 2 AS c, -tip AS d "
    "FROM dataset ORDER BY trip_id LIMIT 10",
    "SELECT trip_id, passengers & 1 AS a, passengers | 8 AS b, passengers ^ 3 AS c, "
    "~passengers AS d, shiftleft(passengers, 2) AS e FROM dataset ORDER BY 1 LIMIT 10",
    "SELECT CAST(fare AS INT) AS f, CAST(passengers AS STRING) AS p, "
    "CAST('2024-01-02' AS DATE) AS d FROM dataset ORDER BY trip_id LIMIT 5",
    "SELECT upper(city) AS u, lower(payment) AS l, length(city) AS n, "
    "substring(city, 1, 3) AS s, concat(city, '-', payment) AS c, "
    "concat_ws('/', city, payment) AS w FROM dataset ORDER BY trip_id LIMIT 10",
    "SELECT ucase(city) AS u, lcase(city) AS l, trim('  x  ') AS t, ltrim('  x') AS lt, "
    "rtrim('x  ') AS rt, reverse(city) AS r, initcap('hello world') AS i",
    "SELECT replace(city, 'a', 'A') AS r, translate(city, 'ai', 'AI') AS t, "
    "instr(city, 'a') AS i, locate('a', city) AS lo, left(city, 2) AS le, "
    "right(city, 2) AS ri FROM dataset ORDER BY trip_id LIMIT 10",
    "SELECT regexp_replace(city, '[aeiou]', '_') AS r, regexp_extract(payment, '(c)(a)', 1) "
    "AS e, split(concat(city, ',', payment), ',') AS s FROM dataset ORDER BY trip_id LIMIT 10",
    "SELECT city || '!' AS c, md5(city) AS m, sha2(city, 256) AS s, crc32(city) AS c32, "
    "hash(city) AS h, xxhash64(city) AS x FROM dataset ORDER BY trip_id LIMIT 5",
    "SELECT abs(-fare) AS a, round(fare, 1) AS r, floor(fare) AS f, ceil(fare) AS c, "
    "sqrt(fare) AS s, pow(passengers, 2) AS p, ln(fare) AS l, log10(fare) AS l10, "
    "exp(1) AS e, greatest(fare, tip) AS g, least(fare, tip) AS le FROM dataset "
    "ORDER BY trip_id LIMIT 5",
    "SELECT year(pickup_time) AS y, month(pickup_time) AS m, dayofmonth(pickup_time) AS d, "
    "hour(pickup_time) AS h, to_date(pickup_time) AS dt, date_add(to_date(pickup_time), 3) "
    "AS plus, datediff(to_date(pickup_time), DATE '2024-01-01') AS since FROM dataset "
    "ORDER BY trip_id LIMIT 5",
    "SELECT date_trunc('MONTH', pickup_time) AS m, unix_timestamp(pickup_time) AS u, "
    "from_unixtime(0, 'yyyy-MM-dd') AS z, last_day(to_date(pickup_time)) AS l "
    "FROM dataset ORDER BY trip_id LIMIT 5",
    "SELECT array(1, 2, 3) AS a, size(array(1, 2)) AS s, array_contains(array(1, 2), 2) AS c, "
    "element_at(array(1, 2), 1) AS e, sort_array(array(3, 1, 2)) AS so, "
    "array_distinct(array(1, 1, 2)) AS d",
    "SELECT map('a', 1) AS m, map_keys(map('a', 1)) AS k, named_struct('x', 1, 'y', 2) AS s, "
    "struct(1, 2) AS t",
    "SELECT filter(array(1, 2, 3), x -> x > 1) AS f, exists(array(1, 2), x -> x = 2) AS e, "
    "forall(array(1, 2), x -> x > 0) AS a, zip_with(array(1, 2), array(3, 4), (x, y) -> x + y) "
    "AS z",
    "SELECT get_json_object('{\"a\": 1}', '$.a') AS j, to_json(named_struct('a', 1)) AS t, "
    "from_json('{\"a\": 1}', 'a INT') AS f, json_array_length('[1, 2]') AS n",
    "SELECT parse_url('http://x.org/p?q=1', 'HOST') AS h, url_encode('a b') AS e, "
    "url_decode('a%20b') AS d, base64('x') AS b, hex(255) AS hx",
    # aggregates, groups, windows
    "SELECT city, count(*) AS n, sum(passengers) AS p, round(avg(fare), 3) AS f, min(tip) AS "
    "lo, max(tip) AS hi FROM dataset GROUP BY city ORDER BY city",
    "SELECT city, count(DISTINCT payment) AS n FROM dataset GROUP BY city ORDER BY city",
    "SELECT city, count(*) AS n FROM dataset GROUP BY city HAVING count(*) > 10 ORDER BY city",
    "SELECT city, payment, count(*) AS n FROM dataset GROUP BY city, payment ORDER BY 1, 2",
    "SELECT city, payment, count(*) AS n FROM dataset GROUP BY ROLLUP(city, payment) ORDER BY 1, 2",
    "SELECT city, payment, count(*) AS n FROM dataset GROUP BY CUBE(city, payment) ORDER BY 1, 2",
    "SELECT city, payment, count(*) AS n FROM dataset GROUP BY GROUPING SETS ((city), "
    "(payment), ()) ORDER BY 1, 2",
    "SELECT city, grouping(city) AS g, count(*) AS n FROM dataset GROUP BY ROLLUP(city) ORDER BY 1",
    "SELECT city, count(*) FILTER (WHERE fare > 30) AS n FROM dataset GROUP BY city ORDER BY 1",
    "SELECT count_if(fare > 30) AS n, bool_and(fare > 0) AS b, bool_or(tip > 7) AS o, "
    "max_by(trip_id, fare) AS m, min_by(trip_id, fare) AS mi FROM dataset",
    "SELECT round(stddev(fare), 6) AS s, round(variance(fare), 4) AS v, median(passengers) "
    "AS m, percentile(passengers, 0.5) AS p FROM dataset",
    "SELECT city, sort_array(collect_set(payment)) AS ps FROM dataset GROUP BY city ORDER BY city",
    "SELECT city, count(*) AS n FROM dataset GROUP BY ALL ORDER BY ALL",
    "SELECT trip_id, row_number() OVER (PARTITION BY city ORDER BY fare, trip_id) AS r "
    "FROM dataset ORDER BY trip_id LIMIT 20",
    "SELECT trip_id, rank() OVER (ORDER BY passengers) AS r, dense_rank() OVER "
    "(ORDER BY passengers) AS d FROM dataset ORDER BY trip_id LIMIT 20",
    "SELECT trip_id, lag(fare) OVER (ORDER BY trip_id) AS p, lead(fare, 2) OVER "
    "(ORDER BY trip_id) AS n FROM dataset ORDER BY trip_id LIMIT 20",
    "SELECT trip_id, round(sum(fare) OVER (PARTITION BY city ORDER BY trip_id ROWS BETWEEN "
    "UNBOUNDED PRECEDING AND CURRENT ROW), 2) AS run FROM dataset ORDER BY trip_id LIMIT 20",
    "SELECT trip_id, ntile(4) OVER (ORDER BY trip_id) AS q FROM dataset ORDER BY trip_id LIMIT 20",
    # joins, set operations, subqueries, CTEs
    "SELECT a.city, count(*) AS n FROM dataset a JOIN dataset b ON a.trip_id = b.trip_id "
    "GROUP BY a.city ORDER BY 1",
    "SELECT count(*) AS n FROM dataset a LEFT JOIN dataset b ON a.trip_id = b.trip_id + 1",
    "SELECT count(*) AS n FROM dataset a LEFT SEMI JOIN dataset b ON a.trip_id = b.trip_id "
    "AND b.fare > 40",
    "SELECT count(*) AS n FROM dataset a LEFT ANTI JOIN dataset b ON a.trip_id = b.trip_id "
    "AND b.fare > 40",
    "SELECT count(*) AS n FROM (SELECT city FROM dataset LIMIT 3) a CROSS JOIN "
    "(SELECT payment FROM dataset LIMIT 4) b",
    "SELECT city FROM dataset WHERE fare > 50 UNION SELECT city FROM dataset WHERE tip > 7 "
    "ORDER BY 1",
    "SELECT city FROM dataset UNION ALL SELECT payment FROM dataset ORDER BY 1 LIMIT 10",
    "SELECT city FROM dataset INTERSECT SELECT city FROM dataset WHERE fare > 60 ORDER BY 1",
    "SELECT city FROM dataset EXCEPT SELECT city FROM dataset WHERE fare > 60 ORDER BY 1",
    "SELECT trip_id FROM dataset WHERE fare > (SELECT avg(fare) FROM dataset) ORDER BY 1 LIMIT 10",
    "SELECT trip_id FROM dataset d WHERE EXISTS (SELECT 1 FROM dataset e WHERE "
    "e.trip_id = d.trip_id + 1 AND e.fare > 50) ORDER BY 1",
    "SELECT trip_id FROM dataset WHERE trip_id IN (SELECT trip_id FROM dataset WHERE tip > 7) "
    "ORDER BY 1",
    "SELECT * FROM (SELECT city, count(*) AS n FROM dataset GROUP BY city) t WHERE n > 10 "
    "ORDER BY city",
    "WITH a AS (SELECT city, fare FROM dataset), b AS (SELECT city, max(fare) AS m FROM a "
    "GROUP BY city) SELECT * FROM b ORDER BY city",
    "WITH t AS (SELECT 1 AS x) SELECT x FROM t",
    "SELECT DISTINCT city FROM dataset ORDER BY city",
    "SELECT DISTINCT city, payment FROM dataset ORDER BY 1, 2",
    "SELECT trip_id FROM dataset ORDER BY fare DESC, trip_id LIMIT 5 OFFSET 2",
    "SELECT * FROM dataset WHERE trip_id < 5 ORDER BY trip_id",
    "SELECT d.* FROM dataset AS d WHERE d.trip_id = 7",
    "SELECT `city`, `fare` FROM `dataset` WHERE `trip_id` = 3",
    "SELECT count(*) AS n FROM dataset -- a comment\n WHERE fare > 10",
    "/* leading */ SELECT count(*) AS n FROM dataset",
    "select CITY, COUNT(*) as N from DATASET group by CITY order by CITY",
    "SELECT 'it''s' AS a, 'back\\\\slash' AS b, \"double\" AS c",
    "SELECT 'caf\u00e9' AS c, '\u00fc\u00f1\u00ee' AS u",
    "SELECT x FROM dataset LATERAL VIEW posexplode(array('a', 'b')) t AS p, x "
    "WHERE trip_id = 1 ORDER BY x",
    "SELECT s FROM dataset LATERAL VIEW OUTER explode(array()) t AS s WHERE trip_id = 1",
    "SELECT stack(2, 'a', 1, 'b', 2) AS (k, v)",
    "SELECT inline(array(struct(1, 'a'), struct(2, 'b')))",
    "SELECT explode(map('a', 1, 'b', 2))",
    "SELECT * FROM dataset DISTRIBUTE BY city SORT BY trip_id LIMIT 0",
    "SELECT DATE '2024-02-28' + INTERVAL 1 DAY AS i, make_date(2024, 2, 29) AS d, "
    "CAST(make_interval(0, 1) AS STRING) AS m",
    "SELECT approx_count_distinct(city, 0.05) AS n FROM dataset",
    "SELECT approx_count_distinct(city) AS n FROM dataset",
    "SELECT sequence(1, 10, 3) AS s, slice(array(1, 2, 3, 4), 2, 2) AS sl",
    "SELECT city, try_divide(fare, 0) AS d, try_add(passengers, 1) AS a FROM dataset "
    "ORDER BY trip_id LIMIT 3",
    "SELECT typeof(fare) AS t, typeof(city) AS c FROM dataset LIMIT 1",
    "SELECT format_number(12332.123456, 4) AS f",
    "SELECT bit_count(7) AS b, factorial(5) AS f, conv('100', 2, 10) AS c, pmod(-7, 3) AS p",
    "SELECT 'a\\'; DROP VIEW dataset; --' AS x",
    "SELECT * FROM dataset WHERE city = 'Paris' -- '; DROP VIEW dataset",
    "SELECT try_cast('1' AS INT)",
    "FROM dataset SELECT city",
    "VALUES (1), (2)",
    "FROM dataset |> WHERE fare > 30 |> AGGREGATE count(*) AS n GROUP BY city",
    "SELECT x'41' AS b",
]

#: Queries the embedded guard accepts and the Connect guard refuses before the server sees
#: them, on purpose (docs/spark.md): sqlglot cannot parse the construct, or would rewrite it
#: into something else. The safe direction only; the test checks each still disagrees so.
CONNECT_STRICTER = {
    "TABLE dataset": "sqlglot reads `TABLE` as a column name",
    "SELECT * FROM IDENTIFIER('dataset')": "IDENTIFIER(...) is resolved by Spark's analyzer",
    "SELECT IDENTIFIER('upper')(city) FROM dataset": "IDENTIFIER(...) likewise",
    "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY fare) FROM dataset": (
        "sqlglot writes it back as percentile_approx: another answer"
    ),
    "SELECT * FROM dataset TABLESAMPLE (BUCKET 1 OUT OF 2)": "sampling is not in TEXT_NODES",
}

#: Commands and other non-queries, each as Spark would take them.
STATEMENTS = [
    "SET spark.sql.runSQLOnFiles=true",
    "SET spark.sql.variable.substitute = true",
    "SET",
    "RESET",
    "CACHE TABLE dataset",
    "CACHE LAZY TABLE leak AS SELECT * FROM dataset",
    "UNCACHE TABLE dataset",
    "CLEAR CACHE",
    "ADD JAR /tmp/evil.jar",
    "ADD FILE /etc/passwd",
    "LIST FILES",
    "REFRESH TABLE dataset",
    "SHOW TABLES",
    "SHOW FUNCTIONS",
    "DESCRIBE dataset",
    "DESCRIBE FUNCTION reflect",
    "EXPLAIN SELECT * FROM dataset",
    "EXPLAIN EXTENDED SELECT reflect('java.lang.System', 'exit', 0)",
    "USE other",
    "CREATE TABLE evil (a INT)",
    "CREATE TEMPORARY VIEW evil AS SELECT 1",
    "CREATE TEMPORARY FUNCTION f AS 'org.evil.F'",
    "CREATE FUNCTION f AS 'org.evil.F' USING JAR '/tmp/evil.jar'",
    "DROP VIEW dataset",
    "DROP TEMPORARY FUNCTION f",
    "INSERT INTO dataset SELECT * FROM dataset",
    "INSERT OVERWRITE TABLE dataset SELECT * FROM dataset",
    "DELETE FROM dataset WHERE 1 = 1",
    "UPDATE dataset SET fare = 0",
    "MERGE INTO dataset t USING dataset s ON t.trip_id = s.trip_id WHEN MATCHED THEN DELETE",
    "TRUNCATE TABLE dataset",
    "ALTER VIEW dataset AS SELECT 1",
    "ANALYZE TABLE dataset COMPUTE STATISTICS",
    "LOAD DATA LOCAL INPATH '/etc/passwd' INTO TABLE dataset",
    "MSCK REPAIR TABLE dataset",
    "SELECT * FROM dataset; DROP VIEW dataset",
    "SELECT 1; SELECT 2",
    "SELECT * FROM dataset VERSION AS OF 1",
    "SELECT * FROM dataset TIMESTAMP AS OF '2024-01-01'",
    "SELECT * FROM STREAM dataset",
    "SELECT TRANSFORM(city) USING 'cat' AS (c) FROM dataset",
    "SELECT TRANSFORM(*) USING '/bin/sh -c id' FROM dataset",
    "SELECT MAP(city) USING 'cat' FROM dataset",
    "SELECT /*+ REPARTITION(1000) */ * FROM dataset",
    "SELECT /*+ COALESCE(1) */ * FROM dataset",
    "SELECT /*+ REBALANCE */ * FROM dataset",
    "SELECT * FROM parquet.`/etc`",
    "SELECT * FROM json.`/etc/passwd`",
    "SELECT * FROM `parquet`.`/tmp`",
    "SELECT * FROM spark_catalog.default.other",
    "SELECT * FROM global_temp.leak",
    "SELECT * FROM default.dataset",
    "SELECT * FROM range(10)",
    "SELECT * FROM RANGE(0, 10)",
    "SELECT * FROM explode(array(1, 2))",
    "SELECT * FROM json_tuple('{}', 'a')",
    "SELECT * FROM dataset, LATERAL range(3)",
    "SELECT * FROM secret",
    "SELECT * FROM dataset WHERE trip_id IN (SELECT id FROM secret)",
    "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT * FROM t",
    "SELECT * FROM dataset WHERE city = '${env:HOME}'",
    "SELECT '$' || '{env:HOME}' AS x, reflect('a', 'b')",
    "SELECT udf(city) FROM dataset",
    "SELECT my_schema.my_function(1)",
    "SELECT catalog.builtin.abs(1)",
    "SELECT builtin.builtin.abs(1)",
    "SELECT * FROM IDENTIFIER('secret')",
    "SELECT named_struct('a', reflect('java.lang.System', 'getenv', 'HOME')).a",
    "SELECT java_method('java.lang.System', 'getenv', 'HOME') AS x",
    "SELECT /* reflect */ refl/**/ect('java.lang.System', 'getenv', 'HOME')",
    "SELECT \"reflect\"('java.lang.System', 'getenv', 'HOME')",
    "SELECT `re``flect`('a', 'b')",
    "SELECT U&'\\0041' AS u",
    *GENERATED_FROM_CONSTANTS,
    "SELECT repeat('x', times => 1500000000)",
]


#: How a refused function is spelled: case, quoting, qualifiers, comments, nesting, and
#: every place an expression may hide (subquery, CTE, lambda, VALUES, LATERAL VIEW, ORDER BY,
#: a join condition, a window, an aggregate's FILTER, a set operation).
SPELLINGS = [
    "SELECT {f}({a})",
    "SELECT {F}({a})",
    "SELECT `{f}`({a})",
    "SELECT builtin.{f}({a})",
    "SELECT system.builtin.{f}({a})",
    "SELECT /* c */ {f} /* c */ ({a})",
    "SELECT abs(length(cast({f}({a}) AS string))) AS x",
    "SELECT * FROM dataset WHERE city = (SELECT {f}({a}))",
    "WITH t AS (SELECT {f}({a}) AS r) SELECT r FROM t",
    "SELECT transform(array(1), x -> {f}({a})) AS t",
    "SELECT * FROM VALUES ({f}({a})) AS v(r)",
    "SELECT r FROM dataset LATERAL VIEW explode(array({f}({a}))) t AS r",
    "SELECT trip_id FROM dataset ORDER BY {f}({a})",
    "SELECT 1 AS x UNION ALL SELECT {f}({a})",
    "SELECT count(*) FILTER (WHERE {f}({a}) IS NULL) AS n FROM dataset",
    "SELECT a.trip_id FROM dataset a JOIN dataset b ON {f}({a}) IS NULL",
]

#: Arguments that make each refused function a valid call (so only the guard refuses it).
ARGUMENTS = {
    "reflect": "'java.lang.System', 'getenv', 'HOME'",
    "java_method": "'java.lang.System', 'getenv', 'HOME'",
    "try_reflect": "'java.lang.System', 'getenv', 'HOME'",
    "input_file_name": "",
    "current_user": "",
    "session_user": "",
    "current_database": "",
    "version": "",
    "raise_error": "'boom'",
    "assert_true": "false",
    "xpath_string": "'<a>b</a>', 'a'",
    "from_xml": "'<p><a>1</a></p>', 'a INT'",
    "format_string": "'%s', 'x'",
    "printf": "'%s', 'x'",
    "aes_decrypt": "unhex('00'), '0000111122223333'",
    "parse_json": "'{}'",
    "spark_partition_id": "",
    "from_protobuf": "x'00', 'M', '/tmp/d.desc'",
    "window": "current_timestamp(), '1 hour'",
    "session_window": "current_timestamp(), '1 hour'",
    "hll_sketch_agg": "1",
}


def hostile() -> list[str]:
    """Every hostile query: tests/security's, the statements above, and each refused function
    in every spelling."""
    queries = [
        *(sql.format(target="/tmp/osrdyne-never-written") for sql in COMMANDS),
        *REFLECTION,
        *LEAKS,
        *HOSTILE_SQL,
        *STATEMENTS,
        *(sql for sql, _ in EXPLODING_PLANS),
    ]
    for name in REFUSED:
        assert name not in sql_allowlist.ALLOWED_FUNCTIONS
        args = ARGUMENTS[name]
        for spelling in SPELLINGS:
            queries.append(spelling.format(f=name, F=name.upper(), a=args))
    return list(dict.fromkeys(queries))
