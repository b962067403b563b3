from django.db import migrations

from memoryhub.core.fts import fulltext_index_sql, run_for_vendor

SQL = fulltext_index_sql(
    table="facts_app_fact", column="search_text", fts_table="facts_app_fact_fts", index="fact_search_gin"
)


class Migration(migrations.Migration):
    dependencies = [("facts_app", "0001_initial")]

    operations = [
        migrations.RunPython(run_for_vendor(SQL), run_for_vendor(SQL, backward=True)),
    ]
